// The releases as a user gets them from a registry (test/release/tier.sh pushed them to a
// real distribution registry on 127.0.0.1 with TLS from a test CA): the image by tag, with the
// digest and labels the release build reported; the chart from oci://, its version and its image
// pinned; the program in the pulled image reporting the same version.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import t from 'tap';
import YAML from 'yaml';
import { helm, podman, registry, releases, tmpDir } from './lib/release.js';

const reg = registry();
const { prev, next } = releases();
const dir = tmpDir('pnc-release-');
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

const skopeo = (args: string[]) => execFileSync('skopeo', args, { encoding: 'utf8', stdio: 'pipe' });

t.test('without the test CA the registry is refused: TLS is checked, not skipped', async (t) => {
  t.throws(() => skopeo(['inspect', '--raw', `docker://${next.image}`]), /x509|certificate/);
});

for (const r of [prev, next]) {
  t.test(`${r.version}: the image in the registry is the one the release build pushed`, async (t) => {
    const raw = skopeo(['inspect', '--cert-dir', reg.certDir, `docker://${r.image}`]);
    const info = JSON.parse(raw) as { Digest: string; Labels: Record<string, string>; Architecture: string };
    t.equal(info.Digest, r.digest, 'the digest buildah push reported');
    t.equal(info.Labels['org.opencontainers.image.version'], r.version, 'version label');
    t.equal(info.Labels['org.opencontainers.image.revision'], r.revision, 'revision label');
    t.equal(info.Architecture, 'amd64');
    // A full pull into a fresh layout: every blob over TLS from the registry.
    const t0 = Date.now();
    skopeo([
      'copy',
      '--quiet',
      '--src-cert-dir',
      reg.certDir,
      `docker://${r.image}`,
      `oci:${path.join(dir, r.version)}`,
    ]);
    t.comment(`pull of ${r.image} (all layers): ${Date.now() - t0} ms`);
  });

  t.test(`${r.version}: the chart from oci:// has the version and pins the image`, async (t) => {
    const chart = YAML.parse(
      helm(['show', 'chart', r.chartRef, '--version', r.version, '--ca-file', reg.ca], { dir }),
    ) as {
      version: string;
      appVersion: string;
    };
    t.equal(chart.version, r.version);
    t.equal(chart.appVersion, r.version);
    const values = YAML.parse(
      helm(['show', 'values', r.chartRef, '--version', r.version, '--ca-file', reg.ca], { dir }),
    ) as {
      image: { repository: string; tag: string };
    };
    t.equal(`${values.image.repository}:${values.image.tag}`, r.image, 'image.repository:tag is the pushed image');
  });

  t.test(`${r.version}: the pulled image's program reports its version`, async (t) => {
    const t0 = Date.now();
    podman(['pull', '--quiet', '--cert-dir', reg.certDir, r.image]);
    t.comment(`podman pull ${r.image}: ${Date.now() - t0} ms`);
    const out = podman([
      'run',
      '--rm',
      '--runtime',
      'runc',
      '--ulimit',
      'nofile=20000:20000',
      '--ulimit',
      'nproc=32768:32768',
      r.image,
      '--version',
    ]);
    t.equal(out, `${r.version}\n`, '`pve-nfs-csi --version` in the image');
  });
}

t.test('N and N-1 are different builds', async (t) => {
  t.not(prev.digest, next.digest);
  t.not(prev.version, next.version);
});
