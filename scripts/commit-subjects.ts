// Commit subjects read `<area>: <what>` within 72 characters; the details go in the body. Run as
// a git commit-msg hook (`git config core.hooksPath .githooks`: the message file is the
// argument) and by `npm run lint` over the commits since BASE (no argument). Older history is
// exempt: BASE is the last commit before the rule was enforced. A clone without BASE (CI's
// shallow checkout) checks its newest commit that is not a merge.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';

/** "ci: promtool from Debian, csi-sanity and helm cached by version", the rule's first base. */
export const BASE = '0c34a00d0b50fe087058de1a27cb2e94096eb784';
const MAX = 72;
/** One to three lowercase-or-path words (`nfs`, `kubelet tier`, `docs/testing.md`), a colon, a space. */
const SHAPE = /^[A-Za-z0-9][\w./-]*(?: [\w./-]+){0,2}: \S/;

/** Why a subject breaks the rule, or undefined. */
export function subjectProblem(subject: string): string | undefined {
  if (subject.length > MAX) return `${subject.length} characters (at most ${MAX}; the details go in the body)`;
  if (!SHAPE.test(subject)) return 'not `<area>: <what>` (e.g. `nfs: keep the restore record until the fill ends`)';
  if (subject.endsWith('.')) return 'ends with a full stop';
  return undefined;
}

/** The subject of a commit message as git will keep it: its first line that is not a comment. */
export function subjectOf(message: string): string {
  return message.split('\n').find((l) => l.trim() !== '' && !l.startsWith('#')) ?? '';
}

function git(...args: string[]): string {
  return execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
}

function commitsSinceBase(): { id: string; subject: string }[] {
  let range: string[];
  try {
    git('cat-file', '-e', `${BASE}^{commit}`);
    range = [`${BASE}..HEAD`];
  } catch {
    range = ['-1', 'HEAD'];
  }
  return git('log', '--no-merges', '--format=%h%x00%s', ...range)
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [id = '', subject = ''] = l.split('\0');
      return { id, subject };
    });
}

function main(argv: string[]): number {
  const file = argv[0];
  const commits = file
    ? [{ id: 'this commit', subject: subjectOf(fs.readFileSync(file, 'utf8')) }]
    : commitsSinceBase();
  const bad = commits.flatMap(({ id, subject }) => {
    const why = subjectProblem(subject);
    return why ? [`${id}: "${subject}": ${why}`] : [];
  });
  for (const b of bad) process.stderr.write(`commit subject ${b}\n`);
  return bad.length > 0 ? 1 : 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url))
  process.exitCode = main(process.argv.slice(2));
