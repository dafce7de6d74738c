// jobledger dashboard: what a server-rendered page cannot do by itself. Every change is
// a call of the JSON API with the session cookie and the page's CSRF token; the server
// checks the role again, so hiding a button is a convenience, never the guard.
// Handlers are delegated from the document, so content swapped in by a refresh works
// without binding anything again.
"use strict";

(() => {
  const LOGIN = "/ui/login";
  const FLASH_KEY = "jobledger-flash";
  const loadedAt = Date.now();

  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";
  const byId = (id) => document.getElementById(id);
  const named = (form, name) => form.elements.namedItem(name);

  function toLogin() {
    const here = location.pathname + location.search;
    location.assign(`${LOGIN}?next=${encodeURIComponent(here)}&expired=1`);
  }

  // ---- the JSON API ------------------------------------------------------------------

  async function api(method, url, body) {
    const headers = { Accept: "application/json", "X-CSRF-Token": csrf() };
    const init = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch {
      return { ok: false, status: 0, error: { message: "The server cannot be reached; try again." } };
    }
    if (response.status === 401 && !url.endsWith("/auth/login")) {
      toLogin(); // the session ended: never leave the person on a page that cannot work
      return new Promise(() => {});
    }
    const data = await response.json().catch(() => null);
    const error = data?.error || { message: `The server answered ${response.status}.` };
    return { ok: response.ok, status: response.status, data, error };
  }

  async function busy(button, work) {
    if (button) {
      button.disabled = true;
      button.setAttribute("aria-busy", "true");
    }
    try {
      return await work();
    } finally {
      if (button) {
        button.disabled = false;
        button.removeAttribute("aria-busy");
      }
    }
  }

  // ---- messages and confirmation -----------------------------------------------------

  function flash(message, bad = false, link = null) {
    const box = byId("flash");
    if (!box) return;
    const line = document.createElement("p");
    line.textContent = message;
    if (bad) {
      line.className = "bad";
      line.setAttribute("role", "alert");
    }
    if (link) {
      const anchor = document.createElement("a");
      anchor.href = link.href;
      anchor.textContent = link.text;
      line.append(" ", anchor);
    }
    box.replaceChildren(line);
    clearTimeout(flash.timer);
    flash.timer = setTimeout(() => line.remove(), bad ? 20000 : 10000);
  }

  function flashAfterNavigation(message) {
    sessionStorage.setItem(FLASH_KEY, message);
  }

  function confirmDialog(text, okLabel, danger = true) {
    const dialog = byId("confirm");
    if (!dialog?.showModal) return Promise.resolve(window.confirm(text));
    byId("confirm-text").textContent = text;
    byId("confirm-ok").textContent = okLabel || "Confirm";
    byId("confirm-ok").className = danger ? "danger" : "";
    dialog.returnValue = "";
    const opener = document.activeElement;
    dialog.showModal();
    dialog.querySelector('button[value="cancel"]').focus(); // the safe choice has the focus
    return new Promise((resolve) => {
      dialog.addEventListener(
        "close",
        () => {
          if (opener?.isConnected) opener.focus();
          resolve(dialog.returnValue === "ok");
        },
        { once: true },
      );
    });
  }

  // ---- fetching the page again -------------------------------------------------------

  async function fetchPage(url) {
    let response;
    try {
      response = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    } catch {
      return null;
    }
    if (response.redirected && new URL(response.url).pathname === LOGIN) {
      location.assign(response.url);
      return null;
    }
    if (!response.ok) return null;
    return new DOMParser().parseFromString(await response.text(), "text/html");
  }

  // The lists read the read models, which follow the log a moment behind a change:
  // fetch again (for up to 3 s) until the page shows what ``isFresh`` waits for.
  async function softReload(isFresh = () => true) {
    let page = await fetchPage(location.href);
    for (let round = 0; page && !isFresh(page) && round < 10; round += 1) {
      await new Promise((resolve) => setTimeout(resolve, 300));
      page = await fetchPage(location.href);
    }
    const fresh = page?.getElementById("main");
    const main = byId("main");
    if (fresh && main) {
      main.replaceChildren(...fresh.childNodes);
      enhance(main);
      if (!main.contains(document.activeElement)) main.focus(); // the pressed button is gone
    }
  }

  // Regions marked data-refresh="ms" are replaced by the same region of a fresh copy
  // of the page; not while the person is using one (focus inside, a dialog open). A
  // region marked data-live shows what the log's events change: while the page hears
  // the log's stream, it is refreshed when events come, and polled only now and then.
  const refreshedAt = new Map();
  let refreshing = false;
  let live = false;
  const LIVE_POLL_MS = 30000;
  // Events refresh a region at most this often: a busy log must not turn every open
  // page into a stream of page loads.
  const LIVE_MIN_MS = 1000;

  const every = (region) =>
    live && region.hasAttribute("data-live") ? LIVE_POLL_MS : Number(region.dataset.refresh);

  async function refreshTick() {
    if (refreshing || document.hidden || document.querySelector("dialog[open]")) return;
    const now = Date.now();
    const due = [...document.querySelectorAll("[data-refresh][id]")].filter(
      (region) => now - (refreshedAt.get(region.id) ?? loadedAt) >= every(region),
    );
    if (!due.length) return;
    refreshing = true;
    try {
      const page = await fetchPage(location.href);
      for (const region of due) {
        refreshedAt.set(region.id, Date.now());
        const live = byId(region.id);
        const fresh = page?.getElementById(region.id);
        // A selection of rows is the person's work in progress too.
        const choosing = live?.querySelector("input.pick:checked");
        if (!live || !fresh || choosing || live.contains(document.activeElement)) continue;
        live.replaceWith(fresh);
        enhance(fresh);
      }
    } finally {
      refreshing = false;
    }
  }

  // The log's events as they come (GET /api/v1/events/stream, from now): a burst of
  // them refreshes the live regions once. The EventSource reconnects by itself, from
  // the last event it heard; while it is down the regions are polled as before.
  function listenToTheLog() {
    const types = document.body.dataset.streamTypes;
    if (!window.EventSource || !types || !document.querySelector("[data-live][id]")) return;
    const source = new EventSource("/api/v1/events/stream");
    let soon = null;
    const changed = () => {
      if (soon) return;
      soon = setTimeout(() => {
        soon = null;
        for (const region of document.querySelectorAll("[data-live][id]")) {
          // Due LIVE_MIN_MS after its last refresh (now, if that was longer ago).
          const last = refreshedAt.get(region.id) ?? loadedAt;
          refreshedAt.set(region.id, Math.min(last, last + LIVE_MIN_MS - every(region)));
        }
        refreshTick();
      }, 200);
    };
    for (const type of types.split(" ")) source.addEventListener(type, changed);
    source.onopen = () => {
      live = true;
      document.body.dataset.live = "on";
    };
    source.onerror = () => {
      live = false;
      document.body.dataset.live = "off";
    };
  }

  // ---- action buttons (pause, resume, trigger, delete, cancel) -----------------------

  // A changed job shows its new version; a triggered run shows in the job's runs.
  function showsChange(data) {
    if (data.id && data.version) {
      return (page) =>
        [...page.querySelectorAll(`[data-job="${data.id}"][data-version]`)].every(
          (element) => Number(element.dataset.version) >= data.version,
        );
    }
    if (data.id && data.status) {
      return (page) =>
        !page.getElementById("job-executions") || Boolean(page.querySelector(`[data-execution="${data.id}"]`));
    }
    // A test notification shows among those sent.
    if (data.execution_id) {
      return (page) => Boolean(page.querySelector(`#sent tr[data-execution="${data.execution_id}"]`));
    }
    return () => true;
  }

  // The run an action started, for the flash's link: a job's trigger, a rule's test.
  function runOf(action, data) {
    if (action.endsWith("/trigger")) return data?.id;
    if (action.endsWith("/test")) return data?.execution_id;
    return null;
  }

  const goneFrom = (ids) => (page) => ids.every((id) => !page.querySelector(`#dlq tr[data-execution="${id}"]`));

  async function runAction(button) {
    const { confirm, method, action, body, done } = button.dataset;
    if (confirm && !(await confirmDialog(confirm, button.textContent.trim()))) return;
    const result = await busy(button, () =>
      api(method || "POST", action, body ? JSON.parse(body) : undefined),
    );
    if (!result.ok) {
      flash(result.error.message, true);
      return;
    }
    await softReload(showsChange(result.data || {}));
    const execution = runOf(action, result.data);
    flash(done || "Done.", false, execution && { href: `/ui/executions/${execution}`, text: "See the execution" });
  }

  // ---- sign in and out ---------------------------------------------------------------

  async function signIn(form) {
    const error = byId("login-error");
    error.hidden = true;
    const body = { username: named(form, "username").value.trim(), password: named(form, "password").value };
    if (!body.username || !body.password) {
      error.textContent = "Enter your username and your password.";
      error.hidden = false;
      return;
    }
    const submit = form.querySelector('button[type="submit"]');
    const result = await busy(submit, () => api("POST", "/api/v1/auth/login", body));
    if (result.ok) {
      location.assign(form.dataset.next || "/ui");
      return;
    }
    error.textContent = result.error.message + (result.error.fix ? ` (${result.error.fix})` : "");
    error.hidden = false;
    named(form, "password").select();
  }

  async function signOut() {
    await api("POST", "/api/v1/auth/logout");
    location.assign(LOGIN);
  }

  // ---- the job form: field errors and the live preview -------------------------------

  class FieldError extends Error {
    constructor(field, message) {
      super(message);
      this.field = field;
    }
  }

  function fieldBox(form, field) {
    let name = (field || "").replace(/^\$\.?/, "");
    while (name) {
      const box = form.querySelector(`[data-field="${CSS.escape(name)}"]`);
      if (box) return box;
      name = name.includes(".") ? name.slice(0, name.lastIndexOf(".")) : "";
    }
    return null;
  }

  function setFieldError(box, message, focus = false) {
    const slot = box.querySelector(".field-error");
    if (!slot) return;
    slot.textContent = message;
    slot.hidden = !message;
    const control = box.querySelector("input, select, textarea");
    if (!control) return;
    if (message) control.setAttribute("aria-invalid", "true");
    else control.removeAttribute("aria-invalid");
    if (message && focus) control.focus();
  }

  function clearErrors(form, prefix = "") {
    for (const box of form.querySelectorAll("[data-field]")) {
      if (box.dataset.field.startsWith(prefix)) setFieldError(box, "");
    }
    const top = byId("form-error"); // the job form's; the backfill dialog has its own
    if (!prefix && top) top.hidden = true;
  }

  // The API names the field it refuses; the message goes next to that field, or above
  // the form when no field of the form matches.
  function showError(form, error, focus) {
    const field = (error.field || "").replace(/^\$\.?/, "");
    let message = error.message || "Refused.";
    if (field && message.startsWith(`${field}: `)) message = message.slice(field.length + 2);
    if (error.fix && !error.fix.includes("/schema")) {
      message = `${message.replace(/\.?$/, ".")} Fix: ${error.fix.replace(/\.?$/, ".")}`;
    }
    const box = field ? fieldBox(form, field) : null;
    if (box) {
      setFieldError(box, message, focus);
      return;
    }
    const top = byId("form-error");
    top.textContent = error.fix ? `${error.message.replace(/\.?$/, ".")} Fix: ${error.fix}` : error.message;
    top.hidden = false;
    if (focus) top.scrollIntoView({ block: "center" });
  }

  const kindOf = (form) => form.querySelector('input[name="schedule.kind"]:checked')?.value || "manual";

  const listOf = (text) =>
    text
      .split(/[,\s]+/)
      .map((part) => part.trim())
      .filter(Boolean);

  function isoOrNull(form, name) {
    const local = named(form, name).value;
    return local ? new Date(local).toISOString() : null;
  }

  // The window, exclusions and jitter a cron or an interval may have.
  function rulesOf(form) {
    return {
      timezone: named(form, "schedule.timezone").value.trim() || "UTC",
      jitter_seconds: numberOf(form, "schedule.jitter_seconds"),
      start_at: isoOrNull(form, "schedule.start_at"),
      end_at: isoOrNull(form, "schedule.end_at"),
      exclude_dates: listOf(named(form, "schedule.exclude_dates").value),
      calendars: listOf(named(form, "schedule.calendars").value.toUpperCase()),
    };
  }

  function scheduleOf(form) {
    const kind = kindOf(form);
    if (kind === "cron") {
      return { kind, cron: named(form, "schedule.cron").value.trim(), ...rulesOf(form) };
    }
    if (kind === "interval") {
      return {
        kind,
        every_seconds: numberOf(form, "schedule.every_seconds"),
        offset_seconds: numberOf(form, "schedule.offset_seconds"),
        ...rulesOf(form),
      };
    }
    if (kind === "once") {
      const local = named(form, "schedule.run_at").value;
      if (!local) throw new FieldError("schedule.run_at", "Pick a date and a time.");
      return { kind, run_at: new Date(local).toISOString() };
    }
    return { kind: "manual" };
  }

  function numberOf(form, name) {
    const text = named(form, name).value.trim();
    if (text === "" || !Number.isFinite(Number(text))) throw new FieldError(name, "Enter a number.");
    return Number(text);
  }

  function payloadOf(form) {
    let payload;
    try {
      payload = JSON.parse(named(form, "payload").value.trim() || "{}");
    } catch (error) {
      throw new FieldError("payload", `This is not valid JSON: ${error.message}`);
    }
    if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
      throw new FieldError("payload", 'Write a JSON object, e.g. {"report": "sales"}.');
    }
    return payload;
  }

  function jobBody(form) {
    return {
      name: named(form, "name").value.trim(),
      description: named(form, "description").value,
      handler: named(form, "handler").value,
      payload: payloadOf(form),
      queue: named(form, "queue").value.trim(),
      priority: numberOf(form, "priority"),
      timeout_seconds: numberOf(form, "timeout_seconds"),
      retry: {
        max_retries: numberOf(form, "retry.max_retries"),
        initial_backoff_seconds: numberOf(form, "retry.initial_backoff_seconds"),
        max_backoff_seconds: numberOf(form, "retry.max_backoff_seconds"),
        jitter: named(form, "retry.jitter").checked,
      },
      schedule: scheduleOf(form),
      misfire: named(form, "misfire").value,
      catch_up_cap: numberOf(form, "catch_up_cap"),
      overlap: named(form, "overlap").value,
      depends_on: dependenciesOf(form),
      pause_on_failure: named(form, "pause_on_failure").checked,
    };
  }

  // One upstream a line: a job's id or key, and "finished" to wait for any end.
  function dependenciesOf(form) {
    return named(form, "depends_on")
      .value.split("\n")
      .map((line) => line.trim().split(/\s+/))
      .filter((parts) => parts[0])
      .map(([job, on]) => ({ job, on: on === "finished" ? "finished" : "completed" }));
  }

  // The body ``build`` makes of the form; null, with the message at the field, when a
  // field cannot give its part.
  function bodyOf(form, build) {
    try {
      return build(form);
    } catch (error) {
      if (!(error instanceof FieldError)) throw error;
      setFieldError(fieldBox(form, error.field), error.message, true);
      return null;
    }
  }

  async function submitJob(form) {
    clearErrors(form);
    const body = bodyOf(form, jobBody);
    if (!body) return;
    const submit = form.querySelector('button[type="submit"]');
    const override = named(form, "override")?.checked ? "?override=true" : "";
    const url = form.dataset.url + override;
    const result = await busy(submit, () => api(form.dataset.method, url, body));
    if (result.ok) {
      flashAfterNavigation(`Saved the job ${result.data.definition.name}.`);
      location.assign(`/ui/jobs/${result.data.id}`);
      return;
    }
    showError(form, result.error, true);
  }

  let previewTimer = null;
  let previewRound = 0;

  function schedulePreview(form, delay = 350) {
    byId("preview")?.classList.add("stale"); // fires of the old text stay visible, greyed
    clearTimeout(previewTimer);
    previewTimer = setTimeout(() => preview(form), delay);
  }

  function showKind(form) {
    for (const part of form.querySelectorAll("[data-kind]")) {
      part.hidden = !part.dataset.kind.split(" ").includes(kindOf(form));
    }
    schedulePreview(form, 0);
  }

  const utcText = (iso) => `${new Date(iso).toISOString().slice(0, 19).replace("T", " ")} UTC`;
  const readable = (iso) => iso.replace("T", " ").replace(/(\.\d+)?(Z|[+-]\d\d:\d\d)$/, " $2");

  function fireItem(fire) {
    const item = document.createElement("li");
    item.textContent = readable(fire.local);
    if (!/(Z|\+00:00)$/.test(fire.local)) {
      const utc = document.createElement("span");
      utc.className = "muted";
      utc.textContent = ` (${readable(fire.at).replace(/ (Z|\+00:00)$/, "")} UTC)`;
      item.append(utc);
    }
    if (fire.excluded) {
      item.className = "excluded";
      const note = document.createElement("span");
      note.className = "muted";
      note.textContent = " excluded: recorded as missed";
      item.append(note);
    }
    return item;
  }

  async function preview(form) {
    const round = ++previewRound;
    const list = byId("preview-list");
    const note = byId("preview-note");
    let schedule;
    try {
      schedule = scheduleOf(form);
    } catch (error) {
      byId("preview").classList.remove("stale");
      list.replaceChildren();
      note.textContent = error.message;
      return;
    }
    if (schedule.kind === "manual") {
      byId("preview").classList.remove("stale");
      clearErrors(form, "schedule");
      list.replaceChildren();
      note.textContent = "Runs only when triggered.";
      return;
    }
    const result = await api("POST", "/api/v1/schedules/preview", { schedule, count: 5 });
    if (round !== previewRound) return; // an answer to an older keystroke
    byId("preview").classList.remove("stale");
    clearErrors(form, "schedule");
    if (!result.ok) {
      list.replaceChildren();
      note.textContent = "No preview until the schedule is valid.";
      showError(form, result.error, false);
      return;
    }
    const fires = result.data.fires;
    const jitter = schedule.jitter_seconds ? ` Each runs up to ${schedule.jitter_seconds} s later (jitter, fixed once saved).` : "";
    note.textContent = fires.length ? `The next ${fires.length} in ${result.data.timezone}:${jitter}` : "It never fires.";
    list.replaceChildren(...fires.map(fireItem));
  }

  // ---- backfill ------------------------------------------------------------------------

  function openDialog(button) {
    const dialog = byId(button.dataset.open);
    if (!dialog?.showModal) return;
    dialog.showModal();
    dialog.querySelector("input")?.focus();
    // What it changed shows once it closes: a refresh now would take the dialog away.
    dialog.addEventListener(
      "close",
      () => {
        if (dialog.dataset.changed) softReload();
        delete dialog.dataset.changed;
      },
      { once: true },
    );
  }

  function backfillBody(form, dryRun) {
    const start = named(form, "start").value;
    const end = named(form, "end").value;
    if (!start) throw new FieldError("start", "Pick the first moment of the window.");
    if (!end) throw new FieldError("end", "Pick the last moment of the window.");
    return {
      start: new Date(start).toISOString(),
      end: new Date(end).toISOString(),
      overlap: named(form, "overlap").value,
      max: numberOf(form, "max"),
      reason: named(form, "reason").value,
      dry_run: dryRun,
    };
  }

  function showBackfill(report) {
    const parts = [
      `${report.occurrences} occurrences in the window`,
      `${report.already_fired} already fired`,
      `${report.to_fire} to fire`,
    ];
    if (report.excluded) parts.push(`${report.excluded} excluded`);
    const done = report.dry_run ? "" : `: fired ${report.fired} now${report.buffered ? `, ${report.buffered} buffered` : ""}${report.skipped ? `, ${report.skipped} skipped` : ""}`;
    byId("backfill-summary").textContent = `${parts.join(", ")}${done}.`;
    const shown = report.missing.map((at) => {
      const item = document.createElement("li");
      item.textContent = readable(new Date(at).toISOString());
      return item;
    });
    byId("backfill-list").replaceChildren(...shown);
  }

  async function backfill(button, dryRun) {
    const dialog = byId("backfill");
    const form = byId("backfill-form");
    clearErrors(form);
    byId("backfill-error").hidden = true;
    const body = bodyOf(form, (filled) => backfillBody(filled, dryRun));
    if (!body) return;
    const result = await busy(button, () => api("POST", `/api/v1/jobs/${dialog.dataset.job}/backfill`, body));
    if (!result.ok) {
      const box = fieldBox(form, result.error.field);
      if (box) setFieldError(box, result.error.fix ? `${result.error.message} Fix: ${result.error.fix}` : result.error.message, true);
      else {
        byId("backfill-error").textContent = result.error.message;
        byId("backfill-error").hidden = false;
      }
      return;
    }
    showBackfill(result.data);
    if (!dryRun) {
      flash(`Backfill fired ${result.data.fired} occurrences.`);
      dialog.dataset.changed = "1";
    }
  }

  // ---- the job through time ----------------------------------------------------------

  function fact(list, term, value) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    list.append(dt, dd);
  }

  function scheduleText(schedule) {
    if (schedule.kind === "cron") return `${schedule.cron} in ${schedule.timezone}`;
    if (schedule.kind === "interval") return `every ${schedule.every_seconds} s in ${schedule.timezone}`;
    if (schedule.kind === "once") return `once at ${schedule.run_at}`;
    return "manual (only when triggered)";
  }

  function jobFacts(job) {
    const d = job.definition;
    const list = document.createElement("dl");
    list.className = "facts";
    fact(list, "Status", job.status);
    fact(list, "Name", d.name);
    fact(list, "Schedule", scheduleText(d.schedule));
    fact(list, "Handler", d.handler);
    fact(list, "Queue", `${d.queue}, priority ${d.priority}`);
    fact(list, "Retries", String(d.retry.max_retries));
    fact(list, "Timeout", `${d.timeout_seconds} s`);
    fact(list, "Payload", JSON.stringify(d.payload));
    fact(list, "Next fire", job.next_fire_at ? utcText(job.next_fire_at) : "none");
    return list;
  }

  async function showAsOf(section, asOf, caption) {
    const panel = section.querySelector("#as-of");
    const result = await api("GET", `/api/v1/jobs/${section.dataset.job}?as_of=${encodeURIComponent(asOf)}`);
    const heading = document.createElement("h3");
    if (!result.ok) {
      heading.textContent = result.error.message;
      panel.replaceChildren(heading);
      return;
    }
    heading.textContent = `As it was at ${caption} (version ${result.data.version})`;
    panel.replaceChildren(heading, jobFacts(result.data));
  }

  let sliderTimer = null;

  function slide(slider) {
    const section = slider.closest("[data-versions]");
    const version = Number(slider.value);
    const entry = JSON.parse(section.dataset.versions).find((v) => v.version === version);
    const caption = entry ? `${utcText(entry.at)}, after ${entry.type} by ${entry.by}` : `version ${version}`;
    byId("as-of-label").textContent = `version ${version}: ${caption}`;
    clearTimeout(sliderTimer);
    sliderTimer = setTimeout(() => showAsOf(section, String(version), caption), 150);
  }

  function showMoment(button) {
    const section = button.closest("[data-versions]");
    const local = byId("as-of-time").value;
    if (!local) {
      byId("as-of-time").focus();
      return;
    }
    const moment = new Date(local);
    showAsOf(section, moment.toISOString(), moment.toLocaleString());
  }

  // ---- dead letters ------------------------------------------------------------------

  const picked = () => [...document.querySelectorAll("input.pick:checked")].map((box) => box.value);
  const reason = () => byId("dlq-reason")?.value.trim() || "";

  const SELECTION_BUTTONS = {
    "requeue-selected": "Requeue",
    "retry-selected": "Retry",
    "cancel-selected": "Cancel",
  };

  function updateSelection() {
    const count = picked().length;
    for (const [id, verb] of Object.entries(SELECTION_BUTTONS)) {
      const button = byId(id);
      if (!button) continue;
      button.disabled = count === 0;
      const now = id === "retry-selected" ? " now" : "";
      button.textContent = count ? `${verb} ${count} selected${now}` : `${verb} selected${now}`;
    }
  }

  async function requeueSelected(button) {
    const ids = picked();
    const noun = ids.length === 1 ? "dead letter" : "dead letters";
    if (!ids.length || !(await confirmDialog(`Requeue ${ids.length} ${noun}? Each gets a new attempt budget.`, "Requeue", false))) return;
    let changed = 0;
    const refused = [];
    await busy(button, async () => {
      for (const id of ids) {
        const result = await api("POST", `/api/v1/dlq/${id}/requeue`, { reason: reason() });
        if (result.ok) changed += 1;
        else refused.push(result.error.message);
      }
    });
    await softReload(goneFrom(ids));
    flash(`Requeued ${changed} of ${ids.length}.${refused.length ? ` Refused: ${refused.join("; ")}` : ""}`, refused.length > 0);
  }

  async function requeueMatching(button) {
    const filter = JSON.parse(byId("dlq-bulk").dataset.filter);
    const body = { ...filter, reason: reason() };
    const dry = await busy(button, () => api("POST", "/api/v1/dlq/requeue", { ...body, dry_run: true }));
    if (!dry.ok) return flash(dry.error.message, true);
    const matched = dry.data.matched;
    if (!matched) return flash("No dead letter matches the filter.");
    const noun = matched === 1 ? "dead letter matches" : "dead letters match";
    if (!(await confirmDialog(`${matched} ${noun} the filter. Requeue ${matched === 1 ? "it" : "all of them"}?`, `Requeue ${matched}`, false))) return;
    const shown = [...document.querySelectorAll("#dlq tr[data-execution]")].map((row) => row.dataset.execution);
    const result = await busy(button, () => api("POST", "/api/v1/dlq/requeue", body));
    if (!result.ok) return flash(result.error.message, true);
    await softReload(goneFrom(shown));
    const refused = result.data.refused ? ` (${result.data.refused} no longer dead-lettered)` : "";
    flash(`Requeued ${result.data.changed} of ${result.data.matched}${refused}.`);
  }

  async function requeueOne(button) {
    const result = await busy(button, () => api("POST", `/api/v1/dlq/${button.dataset.requeue}/requeue`, { reason: reason() }));
    if (!result.ok) return flash(result.error.message, true);
    await softReload(goneFrom([button.dataset.requeue]));
    flash("Requeued 1 dead letter.", false, { href: `/ui/executions/${button.dataset.requeue}`, text: "See the execution" });
  }

  async function discardOne(button) {
    if (!(await confirmDialog("Discard this dead letter for good? It will not run again; the log keeps its history.", "Discard"))) return;
    const url = `/api/v1/dlq/${button.dataset.discard}?reason=${encodeURIComponent(reason())}`;
    const result = await busy(button, () => api("DELETE", url));
    if (!result.ok) return flash(result.error.message, true);
    await softReload(goneFrom([button.dataset.discard]));
    flash("Discarded 1 dead letter.");
  }

  // ---- runs in bulk (the executions page) ---------------------------------------------

  const RUN_ACTIONS = {
    retry: {
      verb: "Retry now",
      done: "brought forward",
      explain: "Each that waits for a back-off, a snooze or its start time becomes due at once; the others are left as they are.",
      danger: false,
    },
    cancel: { verb: "Cancel", done: "cancelled", explain: "Running handlers are told to stop.", danger: true },
  };

  // Counted first (a dry run), confirmed with that count, then done.
  async function runsInBulk(button, action, selection) {
    const { verb, done, explain, danger } = RUN_ACTIONS[action];
    const url = `/api/v1/executions/${action}`;
    const body = { ...selection, reason: byId("runs-reason")?.value.trim() || "" };
    const dry = await busy(button, () => api("POST", url, { ...body, dry_run: true }));
    if (!dry.ok) return flash(dry.error.message, true);
    const matched = dry.data.matched;
    if (!matched) return flash("No run matches.");
    const runs = matched === 1 ? "1 run" : `${matched} runs`;
    if (!(await confirmDialog(`${verb}: ${runs}? ${explain}`, `${verb}: ${runs}`, danger))) return;
    const result = await busy(button, () => api("POST", url, body));
    if (!result.ok) return flash(result.error.message, true);
    for (const box of document.querySelectorAll("input.pick:checked")) box.checked = false;
    updateSelection();
    await softReload();
    const refused = result.data.refused ? ` (${result.data.refused} had ended or were due already)` : "";
    flash(`${result.data.changed} of ${result.data.matched} ${done}${refused}.`, false);
  }

  const bulkFilter = () => JSON.parse(byId("runs-bulk").dataset.filter);

  // ---- named limits ------------------------------------------------------------------

  // The form creates a limit; a row's Change button turns it into a change of that one.
  function limitMode(form, name) {
    const field = named(form, "name");
    field.value = name;
    field.readOnly = Boolean(name);
    form.dataset.method = name ? "PUT" : "POST";
    form.dataset.url = name ? `/api/v1/limits/${encodeURIComponent(name)}` : "/api/v1/limits";
    byId("limit-submit").textContent = name ? "Change limit" : "Create limit";
    byId("limit-form-title").textContent = name ? `Change the limit ${name}` : "New named limit";
    byId("limit-new").hidden = !name;
    clearErrors(form);
  }

  function editLimit(button) {
    const form = byId("limit-form");
    limitMode(form, button.dataset.editLimit);
    named(form, "concurrency").value = button.dataset.concurrency;
    named(form, "rate").value = button.dataset.rate;
    named(form, "per_seconds").value = button.dataset.per;
    named(form, "concurrency").focus();
  }

  function newLimit() {
    const form = byId("limit-form");
    form.reset();
    limitMode(form, "");
    named(form, "name").focus();
  }

  const optionalNumber = (form, name) => (named(form, name).value.trim() === "" ? null : numberOf(form, name));

  function limitBody(form) {
    const values = {
      concurrency: optionalNumber(form, "concurrency"),
      rate: optionalNumber(form, "rate"),
      per_seconds: optionalNumber(form, "per_seconds"),
    };
    if (form.dataset.method === "PUT") return values;
    const name = named(form, "name").value.trim();
    if (!name) throw new FieldError("name", "Name the key the limit holds, e.g. stripe.");
    return { name, ...values };
  }

  async function submitLimit(form) {
    clearErrors(form);
    const body = bodyOf(form, limitBody);
    if (!body) return;
    const changing = form.dataset.method === "PUT";
    const result = await busy(byId("limit-submit"), () => api(form.dataset.method, form.dataset.url, body));
    if (!result.ok) return showError(form, result.error, true);
    const { limit, changed } = result.data;
    // The list follows the log a moment behind: wait until it shows this version.
    await softReload((page) => {
      const row = page.querySelector(`#limits tr[data-limit="${CSS.escape(limit.name)}"]`);
      return Number(row?.dataset.version) >= limit.version;
    });
    const verb = changing ? (changed ? "Changed" : "Nothing to change in") : "Created";
    flash(`${verb} the limit ${limit.name}.`);
  }

  // ---- notification rules (admin) ---------------------------------------------------

  const blankToNull = (form, name) => named(form, name).value.trim() || null;

  // One field takes a webhook's or Slack's URL, or an email channel's addresses.
  function channelOf(form) {
    const kind = named(form, "channel.kind").value;
    const where = named(form, "channel").value.trim();
    if (!where) {
      throw new FieldError("channel", kind === "email" ? "Give one or more addresses." : "Give the receiver's URL.");
    }
    if (kind === "email") return { kind, to: where.split(",").map((part) => part.trim()).filter(Boolean) };
    return { kind, url: where, secret: kind === "webhook" ? blankToNull(form, "channel.secret") : null };
  }

  function ruleBody(form) {
    if (!named(form, "name").value.trim()) throw new FieldError("name", "Name the rule, e.g. payments dead letters.");
    return {
      on: named(form, "on").value,
      channel: channelOf(form),
      job: blankToNull(form, "job"),
      queue: blankToNull(form, "queue"),
      handler: blankToNull(form, "handler"),
      workflow: blankToNull(form, "workflow"),
      count: optionalNumber(form, "count"),
      older_than_seconds: optionalNumber(form, "older_than_seconds"),
      cooldown_seconds: optionalNumber(form, "cooldown_seconds"),
      enabled: named(form, "enabled").checked,
    };
  }

  // Only a webhook is signed: the secret's field shows for it alone.
  function showChannel(form) {
    const webhook = named(form, "channel.kind").value === "webhook";
    fieldBox(form, "channel.secret").hidden = !webhook;
  }

  async function submitRule(form) {
    clearErrors(form);
    const body = bodyOf(form, ruleBody);
    if (!body) return;
    const name = named(form, "name").value.trim();
    const url = `/api/v1/notifications/rules/${encodeURIComponent(name)}`;
    const result = await busy(byId("rule-submit"), () => api("PUT", url, body));
    if (!result.ok) return showError(form, result.error, true);
    // The rules are read from the log itself: the fresh page lists the saved one.
    await softReload((page) => Boolean(page.querySelector(`#rules tr[data-rule="${CSS.escape(name)}"]`)));
    flash(result.data.changed ? `Saved the rule ${name}.` : `Nothing to change in the rule ${name}.`);
  }

  // ---- queue maintenance (admin) -----------------------------------------------------

  async function verifyQueue(button) {
    const out = byId("verify-result");
    out.textContent = "Comparing the queue with the log…";
    const result = await busy(button, () => api("GET", "/api/v1/admin/queue/verify"));
    if (!result.ok) {
      out.textContent = result.error.message;
      return;
    }
    const { ok, differences, quarantined = [] } = result.data;
    const line = document.createElement("p");
    const held = quarantined.length ? ` ${quarantined.length} quarantined events are not in the queue (listed below).` : "";
    line.textContent = ok ? "The queue matches the log." : `${differences.length} differences.${held}`;
    const list = document.createElement("ul");
    list.replaceChildren(
      ...[...differences, ...quarantined.map((text) => `quarantined: ${text}`)]
        .slice(0, 50)
        .map((text) => Object.assign(document.createElement("li"), { textContent: text })),
    );
    out.replaceChildren(line, list);
  }

  function showRebuild(status) {
    const box = byId("rebuild-progress");
    if (!box) return;
    box.hidden = false;
    const bar = byId("rebuild-bar");
    bar.max = Math.max(status.total, 1);
    bar.value = status.done;
    const counted = status.total ? `: ${status.done} of ${status.total}` : "";
    byId("rebuild-text").textContent = `${status.state}${counted}${status.message ? `; ${status.message}` : ""}`;
  }

  async function pollRebuild() {
    for (;;) {
      const result = await api("GET", "/api/v1/admin/queue/rebuild");
      if (!result.ok) return flash(result.error.message, true);
      showRebuild(result.data);
      if (result.data.state !== "running") return result.data;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }

  async function rebuildQueue(button) {
    const full = byId("rebuild-full").checked;
    const source = full ? "the whole log" : "the open-executions checkpoint";
    if (!(await confirmDialog(`Rebuild the queue from ${source}? Workers keep running.`, "Rebuild"))) return;
    const started = await api("POST", `/api/v1/admin/queue/rebuild?full=${full}`);
    if (!started.ok) return flash(started.error.message, true);
    const status = await busy(button, pollRebuild);
    if (status) flash(`Queue rebuild ${status.state}.`, status.state === "failed");
  }

  // ---- wiring ------------------------------------------------------------------------

  const CLICKS = [
    ["button[data-action]", runAction],
    ["[data-logout]", signOut],
    ["#as-of-show", showMoment],
    ["#requeue-selected", requeueSelected],
    ["#requeue-matching", requeueMatching],
    ["#retry-selected", (button) => runsInBulk(button, "retry", { ids: picked() })],
    ["#cancel-selected", (button) => runsInBulk(button, "cancel", { ids: picked() })],
    ["#retry-matching", (button) => runsInBulk(button, "retry", bulkFilter())],
    ["#cancel-matching", (button) => runsInBulk(button, "cancel", bulkFilter())],
    ["button[data-requeue]", requeueOne],
    ["button[data-discard]", discardOne],
    ["#verify-queue", verifyQueue],
    ["#rebuild-queue", rebuildQueue],
    ["button[data-open]", openDialog],
    ["#backfill-dry", (button) => backfill(button, true)],
    ["#backfill-run", (button) => backfill(button, false)],
    ["#backfill-close", () => byId("backfill").close()],
    ["button[data-edit-limit]", editLimit],
    ["#limit-new", newLimit],
  ];

  document.addEventListener("click", (event) => {
    for (const [selector, handle] of CLICKS) {
      const target = event.target.closest(selector);
      if (target) {
        event.preventDefault();
        handle(target);
        return;
      }
    }
  });

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (form.id === "login") {
      event.preventDefault();
      signIn(form);
    } else if (form.id === "job-form") {
      event.preventDefault();
      submitJob(form);
    } else if (form.id === "limit-form") {
      event.preventDefault();
      submitLimit(form);
    } else if (form.id === "rule-form") {
      event.preventDefault();
      submitRule(form);
    }
  });

  document.addEventListener("input", (event) => {
    const target = event.target;
    if (target.id === "as-of-version") slide(target);
    const form = target.closest("#job-form");
    if (form && target.name?.startsWith("schedule.") && target.name !== "schedule.kind") schedulePreview(form);
  });

  document.addEventListener("change", (event) => {
    const target = event.target;
    if (target.name === "schedule.kind") showKind(target.form);
    if (target.name === "channel.kind" && target.form?.id === "rule-form") showChannel(target.form);
    if (target.name === "handler" && target.form?.id === "job-form") {
      // The payload the chosen handler declares, if it declares one.
      for (const hint of target.form.querySelectorAll(".payload-hint")) {
        hint.hidden = hint.dataset.handler !== target.value;
      }
    }
    if (target.id === "select-all") {
      for (const box of document.querySelectorAll("input.pick")) box.checked = target.checked;
    }
    if (target.matches("input.pick, #select-all")) updateSelection();
  });

  // ---- times: one format, in UTC or in the browser's zone ------------------------------
  // The server writes every time as <time datetime="ISO">YYYY-MM-DD HH:MM:SS UTC</time>;
  // the switch in the header shows them in this browser's zone instead, with its offset,
  // and is remembered for the next pages.
  const ZONE_KEY = "jobledger.times";

  function localTimes() {
    return localStorage.getItem(ZONE_KEY) === "local";
  }

  function offsetText(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes < 0 ? "-" : "+";
    const pad = (n) => String(Math.floor(Math.abs(n))).padStart(2, "0");
    return `${sign}${pad(minutes / 60)}:${pad(minutes % 60)}`;
  }

  function showTimes(root) {
    const local = localTimes();
    for (const time of root.querySelectorAll("time[datetime]")) {
      if (!time.dataset.shownUtc) time.dataset.shownUtc = time.textContent;
      const date = new Date(time.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) continue;
      time.textContent = local
        ? `${localInput(date).replace("T", " ")} ${offsetText(date)}`
        : time.dataset.shownUtc;
    }
    const button = byId("time-zone");
    if (button) {
      button.textContent = local ? "Local" : "UTC";
      button.setAttribute("aria-pressed", String(local));
    }
  }

  document.addEventListener("click", (event) => {
    if (!event.target.closest("#time-zone")) return;
    localStorage.setItem(ZONE_KEY, localTimes() ? "utc" : "local");
    showTimes(document);
  });

  function localInput(date) {
    const pad = (n) => String(n).padStart(2, "0");
    return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  }

  // What a fresh page or region needs once: local times in pickers, a first preview.
  function enhance(root) {
    showTimes(root);
    for (const input of root.querySelectorAll("input[data-utc]")) {
      if (input.dataset.utc) input.value = localInput(new Date(input.dataset.utc));
    }
    const form = root.querySelector("#job-form");
    if (form) schedulePreview(form, 0);
    const rule = root.querySelector("#rule-form");
    if (rule) showChannel(rule); // a browser may restore another kind than the page's
    if (root.querySelector('#rebuild-queue[data-status="running"]')) pollRebuild();
    updateSelection();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const pending = sessionStorage.getItem(FLASH_KEY);
    if (pending) {
      sessionStorage.removeItem(FLASH_KEY);
      flash(pending);
    }
    enhance(document);
    listenToTheLog();
    setInterval(refreshTick, 500);
  });
})();
