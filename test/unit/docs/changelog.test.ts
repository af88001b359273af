// CHANGELOG.md's Unreleased part has one Added, one Changed and one Fixed section, in that
// order, and nothing else: an entry goes into the section that is there, never a second copy
// of it (Keep a Changelog's kinds; test changes go under Changed).
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The `### ` headings of the `## [Unreleased]` part of a changelog. */
export function unreleasedSections(changelog: string): string[] {
  const start = changelog.indexOf('\n## [Unreleased]');
  if (start < 0) return [];
  const next = changelog.indexOf('\n## ', start + 1);
  const part = changelog.slice(start, next < 0 ? undefined : next);
  return [...part.matchAll(/^### (.+)$/gm)].map((m) => (m[1] ?? '').trim());
}

t.test('Unreleased has one Added, one Changed and one Fixed section', async (t) => {
  t.same(unreleasedSections(fs.readFileSync(path.join(ROOT, 'CHANGELOG.md'), 'utf8')), ['Added', 'Changed', 'Fixed']);
});

t.test('the check reads duplicates and stops at the next version', async (t) => {
  const doc =
    '# C\n\n## [Unreleased]\n\n### Added\n- a\n\n### Tests\n- t\n\n### Added\n- b\n\n## [0.1.0]\n\n### Fixed\n- c\n';
  t.same(unreleasedSections(doc), ['Added', 'Tests', 'Added']);
  t.same(unreleasedSections('# C\n'), []);
});
