// The commands and files a user page tells the reader to run or write, taken from the page itself,
// so the tests run what the page says and the two cannot drift. A block is the fenced code block
// right after a marker line `<!-- install-test: NAME -->` (indented blocks inside list items
// included; the fence's indent is removed).
import fs from 'node:fs';

const MARKER = /^\s*<!-- install-test: (\S+) -->\s*$/;
const FENCE = /^(\s*)```/;

/** NAME → the block's text, for every marked block of the file; a name marked twice is an error. */
export function docBlocks(file: string): Map<string, string> {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const blocks = new Map<string, string>();
  for (let i = 0; i < lines.length; i++) {
    const name = MARKER.exec(lines[i] ?? '')?.[1];
    if (name === undefined) continue;
    let j = i + 1;
    while (j < lines.length && (lines[j] ?? '').trim() === '') j++;
    const open = FENCE.exec(lines[j] ?? '');
    if (!open) throw new Error(`${file}:${i + 1}: marker ${name} is not followed by a fenced block`);
    const indent = open[1] ?? '';
    const body: string[] = [];
    for (j++; j < lines.length && !(lines[j] ?? '').startsWith(`${indent}\`\`\``); j++) {
      const line = lines[j] ?? '';
      body.push(line.startsWith(indent) ? line.slice(indent.length) : line.trimStart());
    }
    if (j >= lines.length) throw new Error(`${file}:${i + 1}: block ${name} is not closed`);
    if (blocks.has(name)) throw new Error(`${file}: block ${name} is marked twice`);
    blocks.set(name, `${body.join('\n')}\n`);
    i = j;
  }
  return blocks;
}

/** The named block, or an error naming the file and the blocks it has. */
export function docBlock(blocks: Map<string, string>, name: string, file: string): string {
  const b = blocks.get(name);
  if (b === undefined)
    throw new Error(`${file} has no block marked ${name} (it has: ${[...blocks.keys()].join(', ')})`);
  return b;
}
