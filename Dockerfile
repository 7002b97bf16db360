# The pgbridge image: `pgbridge run` (the bridge) and `pgbridge apply` (the Spark job, local mode)
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/pgbridge
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY schemas ./schemas
# Editable: bridge/schema.py reads the Avro schemas from the checkout's top-level schemas/,
# which a built wheel does not carry.
# gcc only for the install, which compiles the C accelerator (bridge/native).
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && pip install --no-cache-dir -e . \
 && python -c "import bridge.native as n; assert n.ENABLED, 'C accelerator not built'" \
 && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home pgbridge
USER pgbridge
ENTRYPOINT ["pgbridge"]
CMD ["--help"]
