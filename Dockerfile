# Every leasehold process runs from this Dockerfile; docker-compose.yml picks the role with the
# command:
#   leasehold api | leasehold worker orchestration | worker gpu --model M | worker ci --labels L
# EXTRAS picks the optional dependencies: `gpu` (the default, so a plain build runs every role)
# adds torch, PyAV and numpy for the GPU worker; EXTRAS="" builds the image the API,
# orchestration and CI worker need, without CUDA torch.
FROM python:3.11-slim

# bubblewrap, libseccomp2, slirp4netns, nftables: the CI worker's sandbox; git: CI checkouts.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libseccomp2 slirp4netns nftables git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

ARG EXTRAS=gpu

# torch is the heaviest dependency: its own layer, kept across code changes, built only with the
# gpu extra. The default wheel from PyPI carries CUDA; pass
# --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for a small CPU-only image.
ARG TORCH_INDEX_URL=""
RUN case ",$EXTRAS," in \
        *,gpu,*) \
            if [ -n "$TORCH_INDEX_URL" ]; then \
                pip install --index-url "$TORCH_INDEX_URL" "torch>=2.4"; \
            else \
                pip install "torch>=2.4"; \
            fi ;; \
    esac

WORKDIR /src
COPY . .
# `.[gpu]`, or plain `.` when EXTRAS is empty (pip reads `.[]` as a path).
RUN pip install ".${EXTRAS:+[$EXTRAS]}" \
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
