# syntax=docker/dockerfile:1
# One image for both drivers and both roles: the controller Deployment runs it as a non-root
# user; the node DaemonSet runs it as root and privileged (mkfs, mount, /dev, /sys).
# Node 24 (LTS, supported until 2028-04-30); the tests run on the same major (NODE_VERSION in
# scripts/lib/ensure.sh says why 24).

# --- build: compile TypeScript to dist/ with the dev dependencies ---
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# No dependency needs an install script to build (protobufjs's only prints a warning).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY proto ./proto
COPY src ./src
RUN npm run build

# --- runtime: production dependencies, compiled code and the proto file loaded at start ---
FROM node:24-bookworm-slim
# e2fsprogs/xfsprogs: mkfs, resize2fs, xfs_growfs; util-linux and mount: blkid, findmnt,
# blockdev, mount; nfs-common: mount.nfs for the node's NFS mounts; cryptsetup-bin: LUKS
# volumes (format/open/close/resize, as upstream's node image ships cryptsetup).
RUN apt-get update \
 && apt-get install -y --no-install-recommends e2fsprogs xfsprogs util-linux mount nfs-common cryptsetup-bin \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /src/dist ./dist
# src/server/proto.ts finds proto/csi.proto by walking up from dist/src/server.
COPY proto ./proto
# Numeric, so kubelet can verify runAsNonRoot; the chart's controller runs as the same uid.
USER 65532:65532
ENTRYPOINT ["node", "/app/dist/src/main.js"]
