// What the tests share: DKV's address, and example programs run as real
// processes whose output lines a test waits for.

import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

// dkvEndpoints is $DKV_HTTP (examples/js/js_test.go starts a cluster and
// sets it); without it the tests are skipped.
export const dkvEndpoints = process.env.DKV_HTTP;
export const skipWithoutDkv = dkvEndpoints ? false : 'set DKV_HTTP to the HTTP URL(s) of a running DKV (dkv serve: http://127.0.0.1:7863)';

// freshPrefix is a key prefix of its own for one test run.
export const freshPrefix = (name) => `examples/js/${name}/${crypto.randomBytes(3).toString('hex')}/`;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// waitFor polls cond until it returns something truthy, for at most
// timeoutMs.
export async function waitFor(what, cond, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs / 1000}s: ${what}`);
    await sleep(50);
  }
}

// Proc is an example program run as a process of its own (node script
// args...), its output lines collected as they come.
export class Proc {
  constructor(script, args) {
    this.name = script;
    this.lines = [];
    this.pos = 0; // lines before it have been consumed by waitLine
    this.waiters = new Set();
    this.child = spawn(process.execPath, [path.join(here, script), ...args.map(String)], {
      cwd: here,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.exited = new Promise((resolve) => this.child.on('exit', (code, sig) => resolve(sig || code)));
    this.exited.then(() => this.wake());
    for (const stream of [this.child.stdout, this.child.stderr]) {
      readline.createInterface({ input: stream }).on('line', (line) => {
        this.lines.push(line);
        this.wake();
      });
    }
  }

  wake() {
    for (const w of this.waiters) w();
  }

  running() {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  output() {
    return this.lines.map((l) => '    ' + l).join('\n');
  }

  // waitLine is the match of the first new line matching re; it fails
  // after timeoutMs or when the process ends without one.
  waitLine(re, timeoutMs = 20000) {
    return new Promise((resolve, reject) => {
      const check = () => {
        for (; this.pos < this.lines.length; this.pos++) {
          const m = re.exec(this.lines[this.pos]);
          if (m) {
            this.pos++;
            done();
            return resolve(m);
          }
        }
        if (!this.running()) {
          done();
          reject(new Error(`${this.name} ended before a line matching ${re}; output:\n${this.output()}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${this.name}: no line matching ${re} within ${timeoutMs / 1000}s; output:\n${this.output()}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  // skip marks every line so far as consumed: the next waitLine matches
  // a line yet to come.
  skip() {
    this.pos = this.lines.length;
  }

  signal(sig) {
    if (this.running()) this.child.kill(sig);
  }

  async kill() {
    this.signal('SIGKILL');
    await this.exited;
  }

  // stop sends SIGTERM (after SIGCONT: a stopped process cannot act on
  // it), then SIGKILL after 10 s; it resolves to how the process ended.
  async stop() {
    this.signal('SIGCONT');
    this.signal('SIGTERM');
    const t = setTimeout(() => this.signal('SIGKILL'), 10000);
    const how = await this.exited;
    clearTimeout(t);
    return how;
  }
}
