// A fresh directory under the system's temp dir, removed with everything in it on the test's teardown.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Teardown } from './teardown.js';

export function tempDir(t: Teardown, prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.teardown(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}
