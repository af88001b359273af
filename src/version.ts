// The version reported by GetPluginInfo comes from package.json, found above this module so it
// works from src/ (tsx) and dist/src/ (compiled) alike.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export function packageVersion(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const file = path.join(dir, 'package.json');
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'pve-nfs-csi' && pkg.version) return pkg.version;
    }
    const parent = path.dirname(dir);
    if (parent === dir) return '0.0.0-unknown';
    dir = parent;
  }
}
