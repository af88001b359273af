// Protocol tests of the guest-agent client against a fake agent on a unix socket (no QEMU).
// Run: npx tap test/vm/qga.test.ts
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { guestAgentAlive, guestExec, QgaError } from './qga.js';

interface FakeAgent {
  socket: string;
  requests: Record<string, unknown>[];
  close(): Promise<void>;
}

type Script = (req: Record<string, unknown>, reply: (o: unknown) => void, polls: number) => void;

async function fakeAgent(t: Test, script: Script, stale?: Buffer): Promise<FakeAgent> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qga-test-'));
  const socket = path.join(dir, 'qga.sock');
  const requests: Record<string, unknown>[] = [];
  const conns = new Set<net.Socket>();
  const server = net.createServer((c) => {
    conns.add(c);
    c.on('close', () => conns.delete(c));
    // Answers a previous client abandoned arrive before ours; the client must skip them.
    if (stale) c.write(stale);
    let buf = '';
    let polls = 0;
    c.setEncoding('utf8');
    c.on('data', (d: string) => {
      buf += d;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const req = JSON.parse(buf.slice(0, nl)) as Record<string, unknown>;
        buf = buf.slice(nl + 1);
        requests.push(req);
        const args = req.arguments as Record<string, unknown> | undefined;
        if (req.execute === 'guest-sync-delimited') {
          c.write(Buffer.concat([Buffer.from([0xff]), Buffer.from(JSON.stringify({ return: args?.id }) + '\n')]));
          continue;
        }
        if (req.execute === 'guest-exec-status') polls++;
        script(req, (o) => c.write(JSON.stringify(o) + '\n'), polls);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  const close = async () => {
    for (const c of conns) c.destroy();
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  };
  t.teardown(close);
  return { socket, requests, close };
}

const b64 = (s: string) => Buffer.from(s).toString('base64');

t.test('runs a command and relays output, exit code and input', async (t) => {
  const agent = await fakeAgent(
    t,
    (req, reply, polls) => {
      if (req.execute === 'guest-exec') {
        reply({ return: { pid: 42 } });
        return;
      }
      if (polls < 3) {
        reply({ return: { exited: false } });
        return;
      }
      reply({ return: { exited: true, exitcode: 3, 'out-data': b64('hi\n'), 'err-data': b64('oops\n') } });
    },
    // An abandoned answer and an abandoned sync of another client.
    Buffer.concat([Buffer.from('{"return": {"pid": 7}}\n'), Buffer.from([0xff]), Buffer.from('{"return": 1}\n')]),
  );
  const r = await guestExec(agent.socket, ['stat', '-c', '%F', '/x'], { input: 'in', timeoutMs: 5_000 });
  t.equal(r.code, 3);
  t.equal(r.stdout.toString(), 'hi\n');
  t.equal(r.stderr.toString(), 'oops\n');
  const exec = agent.requests.find((q) => q.execute === 'guest-exec');
  t.same(exec?.arguments, { path: 'stat', arg: ['-c', '%F', '/x'], 'capture-output': true, 'input-data': b64('in') });
  t.equal(agent.requests.filter((q) => q.execute === 'guest-exec-status').length, 3);
});

t.test('an agent error becomes a QgaError naming the command', async (t) => {
  const agent = await fakeAgent(t, (_req, reply) =>
    reply({ error: { class: 'GenericError', desc: 'Guest agent command failed' } }),
  );
  await t.rejects(guestExec(agent.socket, ['nope'], { timeoutMs: 5_000 }), {
    name: 'QgaError',
    message: /guest-exec: Guest agent command failed/,
  });
});

t.test('a command that never ends hits the deadline', async (t) => {
  const agent = await fakeAgent(t, (req, reply) =>
    reply(req.execute === 'guest-exec' ? { return: { pid: 9 } } : { return: { exited: false } }),
  );
  await t.rejects(guestExec(agent.socket, ['sleep', '99'], { timeoutMs: 400 }), QgaError);
});

t.test('a missing socket fails fast; an agent that never syncs is not alive', async (t) => {
  const started = Date.now();
  await t.rejects(guestExec('/nonexistent/qga.sock', ['true'], { timeoutMs: 5_000 }), { code: 'ENOENT' });
  t.ok(Date.now() - started < 2_000);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qga-test-'));
  const socket = path.join(dir, 'mute.sock');
  const conns: net.Socket[] = [];
  const mute = net.createServer((c) => conns.push(c));
  await new Promise<void>((resolve) => mute.listen(socket, resolve));
  t.teardown(async () => {
    for (const c of conns) c.destroy();
    await new Promise((resolve) => mute.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  });
  t.equal(await guestAgentAlive(socket, 300), false);
});

t.test('rejects an empty argv', async (t) => {
  await t.rejects(guestExec('/nonexistent', []), QgaError);
});
