"""A workflow's DAG laid out for a server-drawn SVG: no script, no build step.

Steps go in columns by depth (a step sits one column right of the deepest step it runs
after), in their given order within a column; each edge is a curve from the right edge
of a step to the left edge of a step that waits for it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NODE_WIDTH = 150
NODE_HEIGHT = 34
COLUMN_GAP = 56
ROW_GAP = 14
MARGIN = 8
LABEL_CHARS = 18  # what fits in a box at the dashboard's font size


@dataclass(frozen=True)
class Node:
    name: str
    status: str
    x: int
    y: int
    width: int = NODE_WIDTH
    height: int = NODE_HEIGHT

    @property
    def label(self) -> str:
        """The name, cut to what fits in the box."""
        fits = len(self.name) <= LABEL_CHARS
        return self.name if fits else self.name[: LABEL_CHARS - 1] + "…"


@dataclass(frozen=True)
class Edge:
    start: str  # the step waited for
    end: str  # the step that waits
    path: str  # SVG path data


@dataclass(frozen=True)
class Dag:
    width: int
    height: int
    nodes: list[Node]
    edges: list[Edge]


def depths(after: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each step's column: 0 for a step that waits for none, else one more than the
    deepest of its upstreams (the steps are acyclic: the workflow refused otherwise)."""
    found: dict[str, int] = {}
    for name in after:
        pending = [name]
        while pending:
            current = pending[-1]
            missing = [up for up in after[current] if up not in found]
            if missing:
                pending.extend(missing)
                continue
            pending.pop()
            found[current] = 1 + max((found[up] for up in after[current]), default=-1)
    return found


def layout(after: Mapping[str, Sequence[str]], statuses: Mapping[str, str]) -> Dag:
    """The DAG of steps (name -> the steps it runs after), each drawn in its status."""
    column = depths(after)
    rows: dict[int, int] = {}
    nodes: dict[str, Node] = {}
    for name in after:
        depth = column[name]
        row = rows.get(depth, 0)
        rows[depth] = row + 1
        x = MARGIN + depth * (NODE_WIDTH + COLUMN_GAP)
        y = MARGIN + row * (NODE_HEIGHT + ROW_GAP)
        nodes[name] = Node(name, statuses.get(name, "waiting"), x, y)
    edges = [_edge(nodes[up], nodes[name]) for name in after for up in after[name]]
    width = MARGIN * 2 + (max(column.values(), default=0) + 1) * (NODE_WIDTH + COLUMN_GAP)
    height = MARGIN * 2 + max(rows.values(), default=1) * (NODE_HEIGHT + ROW_GAP)
    return Dag(width - COLUMN_GAP, height - ROW_GAP, list(nodes.values()), edges)


def _edge(start: Node, end: Node) -> Edge:
    x1, y1 = start.x + start.width, start.y + start.height // 2
    x2, y2 = end.x, end.y + end.height // 2
    bend = (x2 - x1) // 2
    return Edge(start.name, end.name, f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}")
