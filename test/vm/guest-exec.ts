// CLI: runs one command inside the VM-tier guest and relays its output and exit code.
// usage: guest-exec.sh [-i] [-t SECONDS] [--] COMMAND [ARG...]   (env VM_QGA_SOCKET)
//   -i  forward this process's stdin to the command (read to the end first)
//   -t  whole-call timeout, default 60
import { guestExec } from './qga.js';

function usage(msg: string): never {
  process.stderr.write(
    `guest-exec: ${msg}\nusage: guest-exec.sh [-i] [-t SECONDS] [--] COMMAND [ARG...]  (env VM_QGA_SOCKET)\n`,
  );
  process.exit(2);
}

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  let input = false;
  let timeoutS = 60;
  while (args[0]?.startsWith('-')) {
    const a = args.shift() ?? '';
    if (a === '--') break;
    if (a === '-i') input = true;
    else if (a === '-t') {
      timeoutS = Number(args.shift());
      if (!(timeoutS > 0)) usage('-t needs a positive number of seconds');
    } else usage(`unknown option ${a}`);
  }
  if (args.length === 0) usage('no command');
  const socket = process.env.VM_QGA_SOCKET;
  if (!socket) usage("VM_QGA_SOCKET is not set (run under test/vm/vm.sh run, or export the guest's qgaSocket)");
  const r = await guestExec(socket, args, {
    timeoutMs: timeoutS * 1000,
    ...(input ? { input: await readStdin() } : {}),
  });
  process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  if (r.truncated) process.stderr.write('guest-exec: output was truncated by the guest agent\n');
  if (r.code !== null) return r.code;
  return 128 + (r.signal ?? 0);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`guest-exec: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 125;
  },
);
