# One image for every service in compose.yaml: web, worker, beat and flower
# differ only in their command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TOOLNEXUS_STATE_DIR=/var/lib/toolnexus

RUN useradd --create-home --uid 10001 --user-group toolnexus
WORKDIR /app

# Runtime dependencies in their own layer: it is rebuilt only when
# pyproject.toml or constraints.txt changes, not on every code change. No
# test extras. Exact versions from constraints.txt (tools/update-constraints
# writes it), so two builds of one commit install the same packages.
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt -c constraints.txt \
    && rm /tmp/requirements.txt

COPY README.md ./
COPY shared ./shared
COPY toolnexus ./toolnexus
COPY web ./web
COPY worker ./worker
COPY examples ./examples
RUN pip install --no-deps . \
    && mkdir -p /data/tasks /var/lib/toolnexus \
    && chown toolnexus:toolnexus /data/tasks /var/lib/toolnexus

USER toolnexus
EXPOSE 8080
# Every role is a subcommand: web, worker, beat, flower (compose.yaml).
CMD ["toolnexus-serve", "web", "--host", "0.0.0.0", "--port", "8080"]
