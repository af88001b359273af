// Writes the go.mod of a wrapper module that builds a command of an upstream module which
// cannot be `go install`ed because its go.mod carries `replace` directives (replaces only apply
// in the main module, so the wrapper has to repeat them).
// Usage: go mod edit -json UPSTREAM/go.mod | node gomod.mjs WRAPPER_PATH MODULE VERSION [STAGING_VERSION]
// Module-to-module replaces are copied verbatim. A replace onto a local directory (Kubernetes'
// ./staging/src/k8s.io/*) becomes the published module at STAGING_VERSION (k8s.io/api v0.37.2
// for Kubernetes v1.37.2) when the upstream requires it at the placeholder v0.0.0; other local
// replaces point at modules the upstream requires at their real versions and are dropped, except
// a nested module of the same repository (external-snapshotter's ./client): its tree at this
// release is that module at the same VERSION, so it becomes that.
import { readFileSync } from 'node:fs';

const [wrapper, module, version, staging] = process.argv.slice(2);
const up = JSON.parse(readFileSync(0, 'utf8'));
const required = new Map((up.Require ?? []).map((r) => [r.Path, r.Version]));
// github.com/o/r/v8 -> github.com/o/r/: the prefix of every module nested in the same repository.
const repo = module.replace(/\/v\d+$/, '') + '/';
const lines = [`module ${wrapper}`, '', `go ${up.Go}`, '', `require ${module} ${version}`, ''];
for (const r of up.Replace ?? []) {
  const old = r.Old.Version ? `${r.Old.Path} ${r.Old.Version}` : r.Old.Path;
  if (r.New.Version) {
    lines.push(`replace ${old} => ${r.New.Path} ${r.New.Version}`);
  } else if (r.Old.Path.startsWith(repo) && r.New.Path.startsWith('./')) {
    lines.push(`replace ${old} => ${r.Old.Path} ${version}`);
  } else if (required.get(r.Old.Path) === 'v0.0.0') {
    if (!staging) throw new Error(`${r.Old.Path} is a local replace at v0.0.0; give STAGING_VERSION`);
    lines.push(`replace ${old} => ${r.Old.Path} ${staging}`);
  }
}
for (const e of up.Exclude ?? []) lines.push(`exclude ${e.Path} ${e.Version}`);
process.stdout.write(lines.join('\n') + '\n');
