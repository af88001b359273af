#!/usr/bin/env bash
# Stands in for the csi-sanity binary (CSI_SANITY=this file, test/sanity/run.ts): runs
# the csi-sanity image ($CSI_SANITY_IMAGE) with podman, same arguments. Every path csi-sanity
# gets (sockets, parameter files, mount and staging dirs, the JUnit report) lies under the
# checkout's .run/, which the container sees at the same path; the driver under test runs on the
# host and makes its mounts there. No network: it dials unix sockets only.
set -euo pipefail
run="$(cd "$(dirname "$0")/../.." && pwd)/.run"
mkdir -p "$run"
exec podman run --rm --network=none --tmpfs /tmp \
  --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
  --volume "$run:$run" "${CSI_SANITY_IMAGE:?CSI_SANITY_IMAGE names the csi-sanity image}" "$@"
