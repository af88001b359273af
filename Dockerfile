# syntax=docker/dockerfile:1
# One image for both drivers and both roles: the controller Deployment runs it as a non-root
# user; the node DaemonSet runs it as root and privileged (mkfs, mount, /dev, /sys).
# Node 24 (LTS, maintained until 2028-04-30): docs/image.md says why 24; the tests run on the
# same major (NODE_VERSION in scripts/lib/ensure.sh). `npm run image` builds and checks this file.

# --- build: compile TypeScript to dist/ with the dev dependencies ---
FROM node:24-bookworm-slim AS build
# Only for builds behind a TLS-intercepting proxy: a CA bundle mounted for the build (never
# copied into the image), e.g. `buildah bud -v /etc/ssl/certs/ca-certificates.crt:/run/ca.crt:ro
# --build-arg npm_config_cafile=/run/ca.crt`. Unset, npm uses Node's own CA store.
ARG npm_config_cafile
WORKDIR /src
COPY package.json package-lock.json ./
# No dependency needs an install script to build (protobufjs's only prints a warning).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY scripts/bundle.ts ./scripts/
COPY scripts/lib/compile-cache.ts ./scripts/lib/
COPY image/entrypoint.sh ./image/
# tsc, then esbuild links dist/src and the production dependencies into dist/bundle, then the
# program starts once per role through the entrypoint to leave its V8 code cache in
# dist/bundle/compile-cache (scripts/bundle.ts). This stage's node is the runtime's (same FROM).
RUN npm run bundle

# --- runtime: the bundled program and its code cache; no node_modules (the CSI descriptor is inside the bundle) ---
FROM node:24-bookworm-slim
ARG npm_config_cafile
# e2fsprogs/xfsprogs: mkfs, resize2fs, xfs_growfs; util-linux and mount: blkid, findmnt,
# blockdev, mount; nfs-common: mount.nfs for the node's NFS mounts; cryptsetup-bin: LUKS
# volumes (format/open/close/resize, as upstream's node image ships cryptsetup); tini: PID 1
# that forwards signals and reaps what mount.nfs and friends leave behind.
RUN apt-get update \
 && apt-get install -y --no-install-recommends e2fsprogs xfsprogs util-linux mount nfs-common \
      cryptsetup-bin tini \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb
WORKDIR /app
ENV NODE_ENV=production
# package.json: the version GetPluginInfo reports. The bundle holds every dependency (74 MB of
# node_modules before, half of it @kubernetes/client-node for the day-2 CLI); their licences are
# in dist/bundle/THIRD-PARTY-LICENSES.txt.
COPY package.json ./
COPY --from=build /src/dist/bundle ./dist/bundle
# Sizes V8's heap from the container's memory limit, then execs node (see the script).
COPY image/entrypoint.sh /app/entrypoint.sh
# Numeric, so kubelet can verify runAsNonRoot; the chart's controller runs as the same uid.
USER 65532:65532
# The release's version (package.json, Chart.yaml and `pve-nfs-csi --version` say the same:
# test/unit/release/versions.test.ts); last, so a version bump rebuilds no other layer.
# scripts/release.sh adds the revision and creation time of the build it makes.
LABEL org.opencontainers.image.title="pve-nfs-csi" \
      org.opencontainers.image.version="0.2.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/pve-nfs-csi/pve-nfs-csi"
ENTRYPOINT ["/usr/bin/tini", "--", "/app/entrypoint.sh"]
