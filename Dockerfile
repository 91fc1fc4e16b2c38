# One image for every leasehold process; docker-compose.yml picks the role with the command:
#   leasehold api | leasehold worker orchestration | worker gpu --model M | worker ci --labels L
FROM python:3.11-slim

# bubblewrap, libseccomp2, slirp4netns, nftables: the CI worker's sandbox; git: CI checkouts.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libseccomp2 slirp4netns nftables git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch is the heaviest dependency: its own layer, kept across code changes. The default wheel
# from PyPI carries CUDA; pass --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# for a small CPU-only image.
ARG TORCH_INDEX_URL=""
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
        pip install --index-url "$TORCH_INDEX_URL" "torch>=2.4"; \
    else \
        pip install "torch>=2.4"; \
    fi

WORKDIR /src
COPY . .
RUN pip install . \
    && useradd --create-home --uid 10001 leasehold \
    && mkdir -p /data \
    && chown leasehold:leasehold /data

USER leasehold
WORKDIR /data
ENV LEASEHOLD_DATA_DIR=/data
EXPOSE 8000 9464

# The console script itself is PID 1: every process installs its own SIGTERM handler (a GPU
# worker turns it into a preemption checkpoint). Compose adds an init for the CI worker.
ENTRYPOINT ["leasehold"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
