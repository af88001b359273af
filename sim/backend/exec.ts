// The host command runner behind the loop backend (tests substitute a fake).

import { execFile } from 'node:child_process';
import type { Exec } from './types.js';

export const hostExec: Exec = (cmd, args) =>
  new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) {
        const detail = stderr.trim() || err.message;
        reject(new Error(`${cmd} ${args.join(' ')}: ${detail}`));
      } else {
        resolve(stdout);
      }
    });
  });
