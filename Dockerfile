# One image for every role: the command picks it (`docker run IMAGE scheduler`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A regular (not editable) install: the migrations ship as package data, so the source
# tree is not needed at run time and is removed.
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
COPY migrations ./migrations
RUN pip install . && rm -rf /build

RUN useradd --create-home --uid 10001 --user-group jobledger
USER jobledger
WORKDIR /home/jobledger

# In a container the API must listen beyond loopback to be reachable at all; JSON logs
# suit a log collector.
ENV JOBLEDGER_API_HOST=0.0.0.0 \
    JOBLEDGER_LOG_FORMAT=json

EXPOSE 8000
ENTRYPOINT ["jobledger"]
CMD ["--help"]
