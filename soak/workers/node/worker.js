'use strict';
// A foreign Belay soak worker in Node.js, written from docs/ and soak/PROTOCOL.md only (issue 51 item 4).
// Every SQL statement below takes `now` from this process's clock (plus BELAY_CLOCK_OFFSET) as a bind
// parameter: no statement calls now() (contract §2 "Clock rule").
// BELAY_ALT (comma-separated) switches on contract-legal alternatives; see README.md.

const crypto = require('crypto');
const pg = require('pg');

pg.types.setTypeParser(20, (v) => (v === null ? null : Number(v))); // int8 -> Number (ids, spend, counts)

// ---------------------------------------------------------------- configuration
const URL = process.env.BELAY_DATABASE_URL;
const NODE = process.env.BELAY_NODE || `node-${process.pid}`;
const QUEUES = (process.env.BELAY_QUEUES || 'soak').split(',').map((s) => s.trim()).filter(Boolean);
const TTL = parseFloat(process.env.BELAY_LEASE_TTL || '10');
const OFFSET_MS = parseFloat(process.env.BELAY_CLOCK_OFFSET || '0') * 1000;
const CALL_MS = Math.max((TTL / 4) * 1000, 2000); // client-side deadline per call (docs/connections.md)
const RENEW_MS = (TTL / 3) * 1000;
const SWEEP_MS = 1000;
const GRACE_MS = 12000; // SIGTERM drain grace: 10 s <= grace <= 15 s (PROTOCOL §1)
const DEFAULT_LIMIT = 10;

const LEGAL_ALTS = [
  'split_spawn',
  'children_each',
  'iso_z',
  'reclaim_each',
  'cron_each',
  'clear_children_apart',
  'renew_per_queue',
  'claim_one',
];
const PROBES = ['step_then_spend']; // deliberately illegal (must be judged INVALID)
const ALT = new Set((process.env.BELAY_ALT || '').split(',').map((s) => s.trim()).filter(Boolean));
for (const a of ALT) {
  if (!LEGAL_ALTS.includes(a) && !PROBES.includes(a)) {
    console.error(`belay-node-worker: unknown BELAY_ALT name ${JSON.stringify(a)}; known: ${[...LEGAL_ALTS, ...PROBES].join(',')}`);
    process.exit(64);
  }
}
if (ALT.has('children_each')) ALT.add('split_spawn');

function log(...args) {
  console.log(new Date().toISOString(), NODE, ...args);
}

// ---------------------------------------------------------------- clock and encodings
function now() {
  return new Date(Date.now() + OFFSET_MS);
}
function addMs(d, ms) {
  return new Date(d.getTime() + ms);
}
// Timestamps the SDK writes inside JSON values: an ISO-8601 instant with offset (sdk-guide §2).
// Default spelling: Python's isoformat() of a UTC datetime with microseconds; iso_z: toISOString().
function iso(d) {
  const z = d.toISOString();
  if (ALT.has('iso_z')) return z;
  // Python's isoformat() drops the fraction when the microseconds are 0 (trace validation compares the
  // `$sleep:` value with the model's string exactly: README "Gaps" 4)
  if (z.endsWith('.000Z')) return z.replace(/\.000Z$/, '+00:00');
  return z.replace(/\.(\d{3})Z$/, '.$1000+00:00');
}
function parseIso(s) {
  // accept any ISO-8601 instant: keep at most millisecond precision for Date
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(s);
  if (!m) return new Date(s);
  const frac = (m[2] || '').padEnd(3, '0').slice(0, 3);
  return new Date(`${m[1]}.${frac}${m[3]}`);
}
function encode(v) {
  return Buffer.from(JSON.stringify(v), 'utf8'); // §2 envelope: compact UTF-8 JSON
}
function decode(buf) {
  if (buf === null || buf === undefined) return null;
  if (buf[0] === 131) return { $opaque: buf.toString('base64') }; // ETF: surfaced opaque
  return JSON.parse(buf.toString('utf8'));
}
function token() {
  return crypto.randomBytes(16).toString('hex');
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

// ---------------------------------------------------------------- connections
function poolFor(max, name) {
  const pool = new pg.Pool({
    connectionString: URL,
    max,
    connectionTimeoutMillis: 3000, // connect_timeout (and pool wait)
    keepAlive: true,
    keepAliveInitialDelayMillis: 10000,
    statement_timeout: Math.round(CALL_MS),
    idle_in_transaction_session_timeout: Math.round(2 * CALL_MS),
    application_name: `${NODE}-${name}`,
    idleTimeoutMillis: 30000,
  });
  pool.on('error', (e) => log(`pool ${name}: idle client error: ${e.message}`));
  return pool;
}
const pools = {
  job: poolFor(8, 'job'),
  claim: poolFor(2, 'claim'),
  renew: poolFor(2, 'renew'),
  sweep: poolFor(2, 'sweep'),
};
const handled = new WeakSet();

const TRANSIENT_CODES = new Set(['40001', '40P01', '57P01', '57P02', '57P03', '53300', '55P03', '57014']);
function isTransient(e) {
  if (!e) return false;
  if (e.deadline) return true;
  const code = e.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    return TRANSIENT_CODES.has(code) || code.startsWith('08');
  }
  if (typeof code === 'string' && code.startsWith('E')) return true; // ECONNREFUSED, ECONNRESET, EPIPE, ...
  const msg = String(e.message || '');
  return /Connection terminated|connection timeout|timeout exceeded|Client has encountered a connection error|not queryable|socket|ECONN|closed|terminat/i.test(
    msg,
  );
}

class Rollback {
  constructor(value) {
    this.value = value;
  }
}

// One call = one borrowed connection under a client-side deadline that destroys the socket
// (docs/connections.md: "make sure the deadline closes the socket"). With txn, BEGIN…COMMIT around fn;
// fn may return a Rollback to end the transaction without committing.
async function call(poolName, fn, { txn = true, deadline = CALL_MS } = {}) {
  const pool = pools[poolName];
  let client;
  try {
    client = await pool.connect();
  } catch (e) {
    // a pool wait or connect that timed out, or a socket error, is transient; a server error keeps its SQLSTATE
    if (!(typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code))) e.deadline = true;
    throw e;
  }
  if (!handled.has(client)) {
    handled.add(client);
    client.on('error', (e) => log(`client error: ${e.message}`));
  }
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      client.connection.stream.destroy();
    } catch (_) {
      /* already gone */
    }
  }, deadline);
  let broken = false;
  try {
    if (txn) await client.query('BEGIN');
    const r = await fn(client);
    if (r instanceof Rollback) {
      if (txn) await client.query('ROLLBACK');
      return r.value;
    }
    if (txn) await client.query('COMMIT');
    return r;
  } catch (e) {
    broken = true;
    if (timedOut) e.deadline = true;
    throw e;
  } finally {
    clearTimeout(timer);
    client.release(broken || timedOut ? true : undefined);
  }
}

// Retry transient faults with capped, jittered exponential backoff (sdk-guide §7).
async function retry(what, f, { giveUpAfterMs = Infinity } = {}) {
  let delay = 100;
  const start = Date.now();
  for (;;) {
    try {
      return await f();
    } catch (e) {
      if (!isTransient(e) || Date.now() - start > giveUpAfterMs) throw e;
      log(`${what}: transient ${e.code || ''} ${e.message}; retrying`);
      await sleep(delay * (0.5 + Math.random()));
      delay = Math.min(delay * 2, 2000);
    }
  }
}

// ---------------------------------------------------------------- job control flow
class Parked extends Error {}
class Cancelled extends Error {}
class Lost extends Error {}
class Fail extends Error {
  constructor(code, detail) {
    super(code);
    this.code = code;
    this.detail = detail === undefined ? null : detail;
  }
}
class Raise extends Error {
  constructor(code, detail) {
    super(code);
    this.code = code;
    this.detail = detail === undefined ? null : detail;
  }
}

const lock = (c, key) => c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [key]);

// ---------------------------------------------------------------- §7 after-terminal steps
// rows: [{id, workflow_id, parent_id}] newly terminal in this transaction.
async function afterTerminal(c, rows, t) {
  const notify = [];
  for (const r of rows) if (r.parent_id !== null && r.parent_id !== undefined) notify.push([r.parent_id, r.id]);
  const wfs = [...new Set(rows.filter((r) => r.workflow_id !== null && r.workflow_id !== undefined).map((r) => r.workflow_id))].sort();
  for (const wf of wfs) {
    await lock(c, `belay_wf:${wf}`);
    const doomed = await settle(c, wf, t);
    for (const d of doomed) if (d.parent_id !== null) notify.push([d.parent_id, d.id]);
  }
  const byParent = new Map();
  for (const [p, id] of notify) {
    if (!byParent.has(p)) byParent.set(p, []);
    byParent.get(p).push(id);
  }
  const scopes = [...byParent.keys()].map((p) => [`job:${p}`, byParent.get(p).sort((a, b) => a - b)]);
  scopes.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (const [scope, ids] of scopes) await deliverChildren(c, scope, ids, t);
}

async function deliverChildren(c, scope, ids, t) {
  await lock(c, `belay_sig:${scope}`);
  await c.query(
    `INSERT INTO belay_signals (scope, name, payload, inserted_at) VALUES ($1, '$children', $2::jsonb, $3)
     ON CONFLICT (scope, name) DO UPDATE SET payload = EXCLUDED.payload, inserted_at = EXCLUDED.inserted_at`,
    [scope, JSON.stringify({ children: ids }), t],
  );
  await c.query(
    `UPDATE belay_jobs SET state = 'ready', ready_at = $2, await_scope = NULL, await_name = NULL
      WHERE state = 'awaiting' AND await_scope = $1 AND await_name = '$children'`,
    [scope, t],
  );
}

// §8.3 settlement: pure function over the workflow's members, to a fixpoint; returns doomed rows.
async function settle(c, wf, t) {
  const { rows } = await c.query(
    'SELECT id, wf_name, state, wf_deps, wf_ignore, parent_id FROM belay_jobs WHERE workflow_id = $1 ORDER BY id',
    [wf],
  );
  const state = new Map(rows.map((r) => [r.wf_name, r.state]));
  const release = new Set();
  const doom = new Set();
  let changed = true;
  while (changed) {
    changed = false;
    for (const r of rows) {
      if (r.state !== 'held' || !r.wf_deps || r.wf_deps.length === 0) continue;
      if (release.has(r.id) || doom.has(r.id)) continue;
      const ignore = r.wf_ignore || [];
      let doomed = false;
      let all = true;
      for (const dep of r.wf_deps) {
        const s = state.get(dep);
        if (s === 'failed' || s === 'cancelled') {
          if (!ignore.includes(s)) doomed = true;
        } else if (s !== 'succeeded') all = false;
      }
      if (doomed) {
        doom.add(r.id);
        state.set(r.wf_name, 'cancelled');
        changed = true;
      } else if (all) {
        release.add(r.id);
        state.set(r.wf_name, 'ready');
        changed = true;
      }
    }
  }
  if (release.size) {
    await c.query(`UPDATE belay_jobs SET state = 'ready' WHERE id = ANY($1::bigint[]) AND state = 'held'`, [[...release]]);
  }
  if (!doom.size) return [];
  const d = await c.query(
    `UPDATE belay_jobs SET state = 'cancelled', finished_at = $2 WHERE id = ANY($1::bigint[]) AND state = 'held'
     RETURNING id, parent_id`,
    [[...doom], t],
  );
  return d.rows;
}

function errorEntry(attempt, t, code, detail) {
  let d = detail === null || detail === undefined ? null : String(detail);
  if (d !== null) {
    const b = Buffer.from(d, 'utf8');
    if (b.length > 8192) d = new TextDecoder('utf-8', { fatal: false }).decode(b.subarray(0, 8192)).replace(/\uFFFD$/, '');
  }
  return { attempt, at: iso(t), error: code, detail: d };
}

function retryBackoffMs(attempt) {
  return Math.min(500 * 2 ** (attempt - 1), 30000);
}
function reclaimBackoffMs(attempt) {
  return Math.min(1000 * 2 ** (attempt - 1), 3600 * 1000); // 1 s doubling to 1 h (sdk-guide §2)
}

// ---------------------------------------------------------------- acks (§7), fenced
const FENCE = 'id = $1 AND state = \'running\' AND attempt = $2';

async function ack(job, outcome) {
  return retry(`ack ${job.id}`, () =>
    call('job', async (c) => {
      const t = now();
      let r;
      if (outcome.t === 'succeed') {
        r = await c.query(
          `UPDATE belay_jobs SET state = 'succeeded', result = $3, finished_at = $4, lease_until = NULL, leased_by = NULL
            WHERE ${FENCE} RETURNING id, state, workflow_id, parent_id`,
          [job.id, job.attempt, encode(outcome.result), t],
        );
      } else if (outcome.t === 'cancel') {
        r = await c.query(
          `UPDATE belay_jobs SET state = 'cancelled', finished_at = $3, lease_until = NULL, leased_by = NULL
            WHERE ${FENCE} RETURNING id, state, workflow_id, parent_id`,
          [job.id, job.attempt, t],
        );
      } else if (outcome.t === 'fail') {
        r = await c.query(
          `UPDATE belay_jobs SET state = 'failed', finished_at = $3, errors = errors || $4::jsonb,
                  lease_until = NULL, leased_by = NULL
            WHERE ${FENCE} RETURNING id, state, workflow_id, parent_id`,
          [job.id, job.attempt, t, JSON.stringify([errorEntry(job.attempt, t, outcome.error, outcome.detail)])],
        );
      } else {
        // retryable error: ready at the retry time while attempts remain, else failed
        r = await c.query(
          `UPDATE belay_jobs SET
                  state = CASE WHEN attempt < max_attempts THEN 'ready' ELSE 'failed' END,
                  ready_at = CASE WHEN attempt < max_attempts THEN $4 ELSE ready_at END,
                  finished_at = CASE WHEN attempt < max_attempts THEN finished_at ELSE $3 END,
                  errors = errors || $5::jsonb, lease_until = NULL, leased_by = NULL
            WHERE ${FENCE} RETURNING id, state, workflow_id, parent_id`,
          [
            job.id,
            job.attempt,
            t,
            addMs(t, retryBackoffMs(job.attempt)),
            JSON.stringify([errorEntry(job.attempt, t, outcome.error, outcome.detail)]),
          ],
        );
      }
      if (r.rows.length === 0) return 'stale';
      const row = r.rows[0];
      if (TERMINAL.has(row.state)) await afterTerminal(c, [row], t);
      return row.state;
    }),
  );
}

async function observe(job, phase, observed) {
  await retry(
    `observe ${job.id}`,
    () =>
      call(
        'job',
        (c) =>
          c.query(
            'INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) VALUES ($1, $2, $3, $4, $5::jsonb, $6)',
            [job.id, job.attempt, NODE, phase, JSON.stringify(observed), now()],
          ),
        { txn: false },
      ),
    { giveUpAfterMs: 20000 },
  );
}

// Deliberate self-kill: the exit observation first, retried until it commits (PROTOCOL §1, duty P1).
async function exitSelf(job, reason) {
  for (;;) {
    try {
      await call(
        'job',
        (c) =>
          c.query(
            'INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) VALUES ($1, $2, $3, \'exit\', $4::jsonb, $5)',
            [job.id, job.attempt, NODE, JSON.stringify({ reason }), now()],
          ),
        { txn: false },
      );
      break;
    } catch (e) {
      log(`exit observation: ${e.message}; retrying`);
      await sleep(200);
    }
  }
  log(`deliberate exit: ${reason} (job ${job.id} attempt ${job.attempt})`);
  process.exit(75);
}

// ---------------------------------------------------------------- the job context: steps, waits, spawn
async function readJob(job) {
  const r = await retry(`read ${job.id}`, () =>
    call(
      'job',
      (c) =>
        c.query(
          `SELECT state, attempt, leased_by, cancel_requested, spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens
             FROM belay_jobs WHERE id = $1`,
          [job.id],
        ),
      { txn: false },
    ),
  );
  return r.rows[0];
}

function overBudget(row) {
  return (
    (row.budget_usd_micros !== null && row.spent_usd_micros > row.budget_usd_micros) ||
    (row.budget_tokens !== null && row.spent_tokens > row.budget_tokens)
  );
}

// A boundary: honour a pending cancel request; with budget, the §8.2 pre-flight too.
async function boundary(job, { budget = false } = {}) {
  const row = await readJob(job);
  if (!row || row.state !== 'running' || row.attempt !== job.attempt) throw new Lost('lease lost');
  if (row.cancel_requested) throw new Cancelled('cancel requested');
  if (budget && overBudget(row)) throw new Fail('budget_exceeded', 'durable spend exceeds a budget (pre-flight)');
  return row;
}

async function readStep(job, name) {
  const r = await retry(`read step ${job.id}/${name}`, () =>
    call('job', (c) => c.query('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [job.id, name]), {
      txn: false,
    }),
  );
  return r.rows.length ? { value: decode(r.rows[0].value) } : null;
}

const INSERT_STEP = `INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at)
  VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1), $2, $3, $4, $5, $6)
  ON CONFLICT (job_id, name) DO NOTHING RETURNING seq`;

// §8.2: journal read; miss => pre-flight, run, journal + spend in one transaction.
async function step(job, name, fn, { usd = 0, tokens = 0, onCross = null } = {}) {
  const hit = await readStep(job, name);
  if (hit) return hit.value;
  await boundary(job, { budget: true });
  const value = await fn();
  const paid = usd !== 0 || tokens !== 0;
  const rec = await retry(`journal ${job.id}/${name}`, () =>
    call('job', async (c) => {
      const t = now();
      await c.query('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [job.id]);
      const ins = await c.query(INSERT_STEP, [job.id, name, encode(value), usd, tokens, t]);
      if (ins.rows.length === 0) {
        const prev = await c.query('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [job.id, name]);
        return { value: decode(prev.rows[0].value), journaled: false };
      }
      if (!paid || ALT.has('step_then_spend')) return { value, journaled: true, over: false };
      const s = await c.query(
        `UPDATE belay_jobs SET spent_usd_micros = spent_usd_micros + $2, spent_tokens = spent_tokens + $3
          WHERE id = $1 RETURNING spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens`,
        [job.id, usd, tokens],
      );
      return { value, journaled: true, over: overBudget(s.rows[0]) };
    }),
  );
  if (rec.journaled && paid && ALT.has('step_then_spend')) {
    // deliberately illegal probe: the spend in a LATER transaction than the step insert
    const s = await retry(`spend ${job.id}/${name}`, () =>
      call('job', (c) =>
        c.query(
          `UPDATE belay_jobs SET spent_usd_micros = spent_usd_micros + $2, spent_tokens = spent_tokens + $3
            WHERE id = $1 RETURNING spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens`,
          [job.id, usd, tokens],
        ),
      ),
    );
    rec.over = overBudget(s.rows[0]);
  }
  if (rec.over) {
    if (onCross) await onCross();
    throw new Fail('budget_exceeded', `step ${name} crossed a budget`);
  }
  return rec.value;
}

async function emit(job, payload) {
  // not retried: a retry could append the event twice (sdk-guide §7)
  try {
    await call('job', async (c) => {
      await c.query('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [job.id]);
      await c.query(
        `INSERT INTO belay_events (job_id, seq, payload, inserted_at)
         VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_events WHERE job_id = $1), $2::jsonb, $3)`,
        [job.id, JSON.stringify(payload), now()],
      );
    });
  } catch (e) {
    log(`emit ${job.id}: ${e.message} (not retried)`);
  }
}

// The fenced park UPDATE (decisions.md §7 table): every park raises max_attempts by one, saturating.
const PARK_SET = `lease_until = NULL, leased_by = NULL,
  max_attempts = LEAST(max_attempts::bigint + 1, 2147483647)::int`;

async function lockRowCheckCancel(c, job) {
  const r = await c.query('SELECT state, attempt, cancel_requested FROM belay_jobs WHERE id = $1 FOR UPDATE', [job.id]);
  const row = r.rows[0];
  if (!row || row.state !== 'running' || row.attempt !== job.attempt) return 'lost';
  if (row.cancel_requested) return 'cancel';
  return null;
}

// Await a signal durably (§7 park rule, §8.1); a park and a resume are cancel boundaries.
async function awaitSignal(job, scope, name) {
  await boundary(job); // on the resume (and before parking)
  const got = await retry(`signal ${job.id}`, () =>
    call('job', (c) => c.query('SELECT payload FROM belay_signals WHERE scope = $1 AND name = $2', [scope, name]), {
      txn: false,
    }),
  );
  if (got.rows.length) return got.rows[0].payload;
  const res = await retry(`park ${job.id}`, () =>
    call('job', async (c) => {
      const t = now();
      await lock(c, `belay_sig:${scope}`);
      const why = await lockRowCheckCancel(c, job);
      if (why) return new Rollback(why);
      const present = await c.query('SELECT 1 FROM belay_signals WHERE scope = $1 AND name = $2', [scope, name]);
      let u;
      if (present.rows.length) {
        u = await c.query(
          `UPDATE belay_jobs SET state = 'ready', ready_at = $3, await_scope = NULL, await_name = NULL, ${PARK_SET}
            WHERE ${FENCE}`,
          [job.id, job.attempt, t],
        );
      } else {
        u = await c.query(
          `UPDATE belay_jobs SET state = 'awaiting', await_scope = $3, await_name = $4, ready_at = NULL, ${PARK_SET}
            WHERE ${FENCE}`,
          [job.id, job.attempt, scope, name],
        );
      }
      return u.rowCount ? 'parked' : new Rollback('lost');
    }),
  );
  if (res === 'cancel') throw new Cancelled('cancel requested at park');
  if (res === 'lost') throw new Lost('lease lost at park');
  throw new Parked();
}

// Durable sleep: journal $sleep:<name> with the wake time, park as ready until then (P7).
async function durableSleep(job, name, seconds) {
  await boundary(job);
  const stepName = `$sleep:${name}`;
  const hit = await readStep(job, stepName);
  const res = await retry(`sleep ${job.id}`, () =>
    call('job', async (c) => {
      const t = now();
      const why = await lockRowCheckCancel(c, job);
      if (why) return new Rollback(why);
      let wake;
      if (hit) wake = parseIso(hit.value);
      else {
        wake = addMs(t, seconds * 1000);
        const ins = await c.query(INSERT_STEP, [job.id, stepName, encode(iso(wake)), 0, 0, t]);
        if (ins.rows.length === 0) {
          const prev = await c.query('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [job.id, stepName]);
          wake = parseIso(decode(prev.rows[0].value));
        }
      }
      if (wake.getTime() <= t.getTime()) return 'awake';
      const u = await c.query(`UPDATE belay_jobs SET state = 'ready', ready_at = $3, ${PARK_SET} WHERE ${FENCE}`, [
        job.id,
        job.attempt,
        wake,
      ]);
      return u.rowCount ? 'parked' : new Rollback('lost');
    }),
  );
  if (res === 'awake') return;
  if (res === 'cancel') throw new Cancelled('cancel requested at sleep');
  if (res === 'lost') throw new Lost('lease lost at sleep');
  throw new Parked();
}

// §8.4 spawn, doubly idempotent: memoized $spawn:<name> step + always keys; ids rebuilt from the keys.
async function spawn(job, name, children) {
  const stepName = `$spawn:${name}`;
  const hit = await readStep(job, stepName);
  if (hit) return hit.value;
  await boundary(job, { budget: true });
  const keys = children.map((_, i) => `$spawn:${job.id}:${name}:${i}`);
  const cols = `(queue, worker, input, state, attempt, max_attempts, errors, spent_usd_micros, spent_tokens,
                 cancel_requested, ready_at, inserted_at, parent_id, unique_key, unique_mode)`;
  const rowSql = (b) => `($${b + 1}, $${b + 2}, $${b + 3}::jsonb, 'ready', 0, 20, '[]'::jsonb, 0, 0, false, $${b + 4}, $${b + 4}, $${b + 5}, $${b + 6}, 'always')`;
  const rowArgs = (ch, i, t) => [ch.queue, ch.worker, JSON.stringify(ch.input), t, job.id, keys[i]];
  const insertChildren = async (c, idxs, t) => {
    const vals = [];
    const args = [];
    for (const i of idxs) {
      vals.push(rowSql(args.length));
      args.push(...rowArgs(children[i], i, t));
    }
    await c.query(`INSERT INTO belay_jobs ${cols} VALUES ${vals.join(', ')} ON CONFLICT DO NOTHING`, args);
  };
  const fetchIds = async (c) => {
    const r = await c.query('SELECT id, unique_key FROM belay_jobs WHERE unique_key = ANY($1::text[])', [keys]);
    const byKey = new Map(r.rows.map((x) => [x.unique_key, x.id]));
    const ids = keys.map((k) => byKey.get(k));
    if (ids.some((x) => x === undefined)) throw new Error(`spawn ${job.id}: a child key is missing after the insert`);
    return ids;
  };
  const journal = async (c, ids, t) => {
    await c.query('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [job.id]);
    const ins = await c.query(INSERT_STEP, [job.id, stepName, encode(ids), 0, 0, t]);
    if (ins.rows.length === 0) {
      const prev = await c.query('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [job.id, stepName]);
      return decode(prev.rows[0].value);
    }
    return ids;
  };
  const all = children.map((_, i) => i);
  if (ALT.has('children_each')) {
    for (const i of [...all].reverse()) {
      await retry(`spawn child ${job.id}/${i}`, () => call('job', (c) => insertChildren(c, [i], now())));
    }
  } else if (ALT.has('split_spawn')) {
    await retry(`spawn children ${job.id}`, () => call('job', (c) => insertChildren(c, all, now())));
  }
  if (ALT.has('split_spawn')) {
    return retry(`spawn journal ${job.id}`, () =>
      call('job', async (c) => {
        const ids = await fetchIds(c);
        return journal(c, ids, now());
      }),
    );
  }
  return retry(`spawn ${job.id}`, () =>
    call('job', async (c) => {
      const t = now();
      await c.query('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [job.id]);
      await insertChildren(c, all, t);
      const ids = await fetchIds(c);
      return journal(c, ids, t);
    }),
  );
}

// Await children: re-verify; if any live, clear the stale $children under the scope lock, re-verify, park.
async function awaitChildren(job) {
  await boundary(job);
  const liveKids = async (c) => {
    const r = await c.query('SELECT state FROM belay_jobs WHERE parent_id = $1', [job.id]);
    return r.rows.length === 0 || r.rows.some((x) => !TERMINAL.has(x.state));
  };
  const first = await retry(`children ${job.id}`, () => call('job', liveKids, { txn: false }));
  if (!first) return;
  const scope = `job:${job.id}`;
  let res = 'again';
  for (let round = 0; res === 'again'; round++) {
    if (ALT.has('clear_children_apart')) {
      await retry(`clear children ${job.id}`, () =>
        call('job', async (c) => {
          await lock(c, `belay_sig:${scope}`);
          await c.query(`DELETE FROM belay_signals WHERE scope = $1 AND name = '$children'`, [scope]);
        }),
      );
    }
    res = await retry(`park children ${job.id}`, () =>
      call('job', async (c) => {
        const t = now();
        await lock(c, `belay_sig:${scope}`);
        if (!ALT.has('clear_children_apart')) {
          await c.query(`DELETE FROM belay_signals WHERE scope = $1 AND name = '$children'`, [scope]);
        }
        if (!(await liveKids(c))) return new Rollback('done');
        const why = await lockRowCheckCancel(c, job);
        if (why) return new Rollback(why);
        // §7 park rule: a $children delivered since the clear (only possible when the clear was its own
        // transaction) must not be slept through: clear and re-verify again (after a few rounds, park as ready).
        const present = await c.query(`SELECT 1 FROM belay_signals WHERE scope = $1 AND name = '$children'`, [scope]);
        let u;
        if (present.rows.length && round < 5) return new Rollback('again');
        if (present.rows.length) {
          u = await c.query(
            `UPDATE belay_jobs SET state = 'ready', ready_at = $3, await_scope = NULL, await_name = NULL, ${PARK_SET}
              WHERE ${FENCE}`,
            [job.id, job.attempt, t],
          );
        } else {
          u = await c.query(
            `UPDATE belay_jobs SET state = 'awaiting', await_scope = $3, await_name = '$children', ready_at = NULL, ${PARK_SET}
              WHERE ${FENCE}`,
            [job.id, job.attempt, scope],
          );
        }
        return u.rowCount ? 'parked' : new Rollback('lost');
      }),
    );
  }
  if (res === 'done') return;
  if (res === 'cancel') throw new Cancelled('cancel requested at children park');
  if (res === 'lost') throw new Lost('lease lost at children park');
  throw new Parked();
}

// ---------------------------------------------------------------- the nine kinds (PROTOCOL §3)
const tokenStep = (job, name, extra = {}) => step(job, name, async () => ({ token: token(), attempt: job.attempt }), extra);

const KINDS = {
  async echo(job) {
    return { echo: job.input.v === undefined ? null : job.input.v, attempt: job.attempt };
  },
  async steps(job) {
    const n = job.input.n;
    const raiseAfter = job.input.raise_after === undefined ? null : job.input.raise_after;
    const pause = job.input.pause_ms || 0;
    const tokens = [];
    for (let i = 1; i <= n; i++) {
      const v = await tokenStep(job, `s${i}`);
      tokens.push(v.token);
      if (job.attempt === 1 && i === raiseAfter) throw new Raise('raised', `raise_after ${i}`);
      if (pause > 0) await sleep(pause);
    }
    return { tokens, attempt: job.attempt };
  },
  async costed(job) {
    const costs = job.input.costs || [];
    const tokens = [];
    for (let i = 1; i <= costs.length; i++) {
      const v = await tokenStep(job, `c${i}`, {
        usd: costs[i - 1],
        onCross: async () => {
          if (job.input.crash_at_crossing && job.attempt === 1) await exitSelf(job, 'crash_at_crossing');
        },
      });
      tokens.push(v.token);
    }
    return { tokens, attempt: job.attempt };
  },
  async awaiter(job) {
    if (job.input.pause_ms) await sleep(job.input.pause_ms);
    const payload = await awaitSignal(job, `job:${job.id}`, job.input.signal);
    return { payload, attempt: job.attempt };
  },
  async parent(job) {
    const k = job.input.children;
    const q = job.input.queue || 'soak';
    const p = job.input.child_pause_ms || 0;
    const kids = [];
    for (let i = 0; i < k; i++) {
      kids.push(
        p > 0
          ? { queue: q, worker: 'steps', input: { n: 1, raise_after: null, pause_ms: p } }
          : { queue: q, worker: 'echo', input: { v: `child-${i}` } },
      );
    }
    const ids = await spawn(job, 'kids', kids);
    await awaitChildren(job);
    return { children: ids, attempt: job.attempt };
  },
  async member(job) {
    if (job.input.fail) throw new Fail('member_failed', `member ${job.input.member} fails on purpose`);
    return { member: job.input.member, attempt: job.attempt };
  },
  async flaky(job) {
    const pre = await tokenStep(job, 'pre');
    const k = job.input.until_attempt;
    const mid = await step(job, 'mid', async () => {
      if (job.attempt <= k) {
        if (job.input.mode === 'exit') await exitSelf(job, 'flaky exit');
        throw new Raise('flaky', `attempt ${job.attempt} <= ${k}`);
      }
      return { token: token(), attempt: job.attempt };
    });
    return { tokens: [pre.token, mid.token], attempt: job.attempt };
  },
  async slow(job) {
    const d = job.input.seconds;
    await emit(job, { phase: 'start', attempt: job.attempt, node: NODE });
    const begin = await tokenStep(job, 'begin');
    await step(
      job,
      'nap',
      async () => {
        await sleep(d * 1000);
        return { token: token(), attempt: job.attempt };
      },
      { usd: 1 },
    );
    const r = await retry(`pre_ack read ${job.id}`, () =>
      call('job', (c) => c.query('SELECT state, attempt, leased_by FROM belay_jobs WHERE id = $1', [job.id]), { txn: false }),
    );
    const row = r.rows[0];
    await observe(job, 'pre_ack', { state: row.state, attempt: row.attempt, leased_by: row.leased_by });
    return { token: begin.token, node: NODE, attempt: job.attempt };
  },
  async sleeper(job) {
    const pre = await tokenStep(job, 'pre');
    await durableSleep(job, 'nap', job.input.seconds);
    const post = await tokenStep(job, 'post');
    return { tokens: [pre.token, post.token], attempt: job.attempt };
  },
};

// ---------------------------------------------------------------- execution and leases
const running = new Map(); // id -> job (this node's executions)
let draining = false;

async function execute(job) {
  let outcome;
  try {
    const kind = KINDS[job.kind];
    if (!kind) throw new Fail('unknown_kind', `no kind ${job.kind}`);
    outcome = { t: 'succeed', result: await kind(job) };
  } catch (e) {
    if (e instanceof Parked) outcome = null;
    else if (e instanceof Lost) {
      log(`job ${job.id} attempt ${job.attempt}: ${e.message}; abandoned`);
      outcome = null;
    } else if (e instanceof Cancelled) outcome = { t: 'cancel' };
    else if (e instanceof Fail) outcome = { t: 'fail', error: e.code, detail: e.detail };
    else if (e instanceof Raise) outcome = { t: 'error', error: e.code, detail: e.detail };
    else {
      log(`job ${job.id}: error ${e.stack || e}`);
      outcome = { t: 'error', error: 'exception', detail: String(e.message || e) };
    }
  }
  try {
    if (outcome) {
      const st = await ack(job, outcome);
      if (st === 'stale') log(`stale ack discarded: job ${job.id} attempt ${job.attempt}`);
      if (st === 'stale' || job.kind === 'slow') await observe(job, 'ack', { state: st });
    }
  } catch (e) {
    log(`ack ${job.id} gave up: ${e.message}`);
  } finally {
    // only this attempt's entry: a stale attempt that ends after the node claimed the job again (its lease
    // lost while the process was stopped) must not take the live attempt out of the renewals (a failover
    // soak, seed 84: the live attempt's lease was never renewed and expired — I1/P2 INVALID)
    if (running.get(job.id) === job) running.delete(job.id);
    const ql = queueLoops.get(job.queue);
    if (ql) ql.poke();
  }
}

// Renew every ttl/3: one statement for all local leases (or one per queue with renew_per_queue).
async function renewOnce(ids) {
  if (!ids.length) return;
  const t = now();
  const r = await call(
    'renew',
    (c) =>
      c.query(
        `UPDATE belay_jobs SET lease_until = $1 WHERE id = ANY($2::bigint[]) AND state = 'running' AND leased_by = $3 RETURNING id`,
        [addMs(t, TTL * 1000), ids, NODE],
      ),
    { txn: false },
  );
  const kept = new Set(r.rows.map((x) => x.id));
  for (const id of ids) if (!kept.has(id) && running.has(id)) running.get(id).lost = true;
}

async function renewLoop() {
  for (;;) {
    const started = Date.now();
    const groups = [];
    const jobs = [...running.values()].filter((j) => !j.lost);
    if (ALT.has('renew_per_queue')) {
      for (const q of QUEUES) groups.push(jobs.filter((j) => j.queue === q).map((j) => j.id));
    } else groups.push(jobs.map((j) => j.id));
    let ok = true;
    for (const ids of groups) {
      try {
        await renewOnce(ids);
      } catch (e) {
        ok = false;
        log(`renew: ${e.code || ''} ${e.message}`);
      }
    }
    const wait = ok ? RENEW_MS - (Date.now() - started) : 300;
    await sleep(Math.max(wait, 50));
  }
}

// ---------------------------------------------------------------- claiming (§6)
const queueOpts = new Map(); // queue -> opts from belay_queues
async function refreshQueues() {
  const r = await call('claim', (c) => c.query('SELECT name, opts FROM belay_queues WHERE name = ANY($1::text[])', [QUEUES]), {
    txn: false,
  });
  const seen = new Set();
  for (const row of r.rows) {
    queueOpts.set(row.name, row.opts || {});
    seen.add(row.name);
  }
  for (const q of QUEUES) if (!seen.has(q)) queueOpts.set(q, {});
}

function localLimit(opts) {
  const l = opts.limit;
  if (typeof l === 'number') return l;
  if (l && typeof l === 'object') return l.max || l.min || DEFAULT_LIMIT;
  return DEFAULT_LIMIT;
}

// Contract §6 says only "round(...)". Python's round() (half to even) was the first guess; trace
// validation showed the model rounds halves UP (a previous window of 4 weighted 0.5 counts as 1):
// see README "Gaps".
function roundHalfUp(x) {
  return Math.floor(x + 0.5);
}

const CLAIMABLE = `((state = 'ready' AND (ready_at IS NULL OR ready_at <= $2)) OR (state = 'awaiting' AND ready_at <= $2))`;

async function claim(q, want) {
  const opts = queueOpts.get(q) || {};
  const gl = opts.global_limit ?? null;
  const rate = opts.rate ?? null;
  const part = opts.partition ?? null;
  return call('claim', async (c) => {
    const t = now();
    let take = want;
    let rateInfo = null;
    if (gl !== null || rate !== null || part !== null) {
      await lock(c, `belay:${q}`);
      if (gl !== null || part !== null) {
        await c.query(`SELECT id FROM belay_jobs WHERE queue = $1 AND state = 'running' FOR UPDATE`, [q]);
      }
      if (gl !== null) {
        const r = await c.query(
          `SELECT count(*) AS n FROM belay_jobs WHERE queue = $1 AND state = 'running' AND lease_until > $2`,
          [q, t],
        );
        take = Math.min(take, Math.max(gl - r.rows[0].n, 0));
      }
      if (rate !== null) {
        const period = rate.period;
        const allowed = rate.allowed;
        const estimate = Math.max(rate.estimate || 1, 1);
        const bucket = rate.resource ? `resource:${rate.resource}` : `queue:${q}`;
        const epoch = t.getTime() / 1000;
        const w = Math.floor(epoch / period) * period;
        const wDate = new Date(w * 1000);
        const pDate = new Date((w - period) * 1000);
        const r = await c.query('SELECT window_start, count FROM belay_rate WHERE bucket = $1 AND window_start = ANY($2::timestamptz[])', [
          bucket,
          [wDate, pDate],
        ]);
        let cur = 0;
        let prev = 0;
        for (const row of r.rows) {
          if (row.window_start.getTime() === wDate.getTime()) cur = row.count;
          else prev = row.count;
        }
        const used = cur + roundHalfUp(prev * (1 - (epoch - w) / period));
        const admit = Math.floor(Math.max(Math.min(allowed - used, allowed), 0) / estimate);
        take = Math.min(take, admit);
        rateInfo = { bucket, wDate, estimate };
      }
    }
    if (ALT.has('claim_one')) take = Math.min(take, 1);
    if (take <= 0) return new Rollback([]);
    let ids;
    if (part !== null) {
      const field = part.field === 'meta' ? 'meta' : 'input';
      const perKey = gl !== null ? gl : localLimit(opts);
      const r = await c.query(
        `WITH live AS (
            SELECT COALESCE(${field}->>$3, '') AS k, count(*) AS n FROM belay_jobs
             WHERE queue = $1 AND state = 'running' AND lease_until > $2 GROUP BY 1),
          ranked AS (
            SELECT id, priority, ready_at, COALESCE(${field}->>$3, '') AS k,
                   row_number() OVER (PARTITION BY COALESCE(${field}->>$3, '') ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC) AS rn
              FROM belay_jobs WHERE queue = $1 AND ${CLAIMABLE})
         SELECT r.id FROM ranked r LEFT JOIN live l ON l.k = r.k
          WHERE r.rn <= GREATEST($4 - COALESCE(l.n, 0), 0)
          ORDER BY r.priority ASC, r.ready_at ASC NULLS FIRST, r.id ASC LIMIT $5`,
        [q, t, part.key, perKey, take],
      );
      ids = r.rows.map((x) => x.id);
    } else {
      const r = await c.query(
        `SELECT id FROM belay_jobs WHERE queue = $1 AND ${CLAIMABLE}
          ORDER BY priority ASC, ready_at ASC NULLS FIRST, id ASC LIMIT $3 FOR UPDATE SKIP LOCKED`,
        [q, t, take],
      );
      ids = r.rows.map((x) => x.id);
    }
    if (!ids.length) return new Rollback([]);
    const u = await c.query(
      `UPDATE belay_jobs SET state = 'running', attempt = attempt + 1, lease_until = $3, leased_by = $4,
              started_at = COALESCE(started_at, $2)
        WHERE id = ANY($1::bigint[]) AND ${CLAIMABLE}
        RETURNING id, queue, worker, input, attempt, max_attempts`,
      [ids, t, addMs(t, TTL * 1000), NODE],
    );
    if (rateInfo && u.rows.length) {
      await c.query(
        `INSERT INTO belay_rate (bucket, window_start, count) VALUES ($1, $2, $3)
         ON CONFLICT (bucket, window_start) DO UPDATE SET count = belay_rate.count + EXCLUDED.count`,
        [rateInfo.bucket, rateInfo.wDate, u.rows.length * rateInfo.estimate],
      );
    }
    return u.rows;
  });
}

const queueLoops = new Map();
function startQueue(q) {
  let wake = null;
  const st = {
    poke() {
      if (wake) wake();
    },
  };
  queueLoops.set(q, st);
  (async () => {
    let idle = 50;
    while (!draining) {
      const limit = localLimit(queueOpts.get(q) || {});
      const mine = [...running.values()].filter((j) => j.queue === q).length;
      let got = 0;
      if (mine < limit) {
        try {
          const rows = await claim(q, limit - mine);
          got = rows.length;
          for (const r of rows) {
            if (draining) log(`claimed job ${r.id} after SIGTERM (claim in flight)`);
            const job = { id: r.id, queue: r.queue, kind: r.worker, input: r.input || {}, attempt: r.attempt, lost: false };
            running.set(job.id, job);
            execute(job);
          }
        } catch (e) {
          if (!isTransient(e)) log(`claim ${q}: ${e.stack || e}`);
          else log(`claim ${q}: transient ${e.code || ''} ${e.message}`);
          idle = 500;
        }
      }
      if (draining) break;
      idle = got > 0 ? 50 : Math.min(idle * 2, 500);
      await new Promise((r) => {
        wake = r;
        setTimeout(r, got > 0 ? 25 : idle);
      });
      wake = null;
    }
  })();
}

// ---------------------------------------------------------------- the sweeper (≤ 2 s): reclaim, reconciler, crons
async function reclaim() {
  const body = async (c, limit) => {
    const t = now();
    const r = await c.query(
      `SELECT id, attempt, max_attempts FROM belay_jobs WHERE state = 'running' AND lease_until <= $1
        ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [t, limit],
    );
    const terminal = [];
    for (const row of r.rows) {
      const entry = JSON.stringify([errorEntry(row.attempt, t, 'lease_expired', null)]);
      if (row.attempt < row.max_attempts) {
        await c.query(
          `UPDATE belay_jobs SET state = 'ready', ready_at = $2, errors = errors || $3::jsonb, lease_until = NULL, leased_by = NULL
            WHERE id = $1 AND state = 'running'`,
          [row.id, addMs(t, reclaimBackoffMs(row.attempt)), entry],
        );
      } else {
        const u = await c.query(
          `UPDATE belay_jobs SET state = 'failed', finished_at = $2, errors = errors || $3::jsonb, lease_until = NULL, leased_by = NULL
            WHERE id = $1 AND state = 'running' RETURNING id, workflow_id, parent_id`,
          [row.id, t, entry],
        );
        terminal.push(...u.rows);
      }
    }
    if (terminal.length) await afterTerminal(c, terminal, t);
    return r.rows.length;
  };
  if (ALT.has('reclaim_each')) {
    for (let i = 0; i < 100; i++) {
      const n = await call('sweep', (c) => body(c, 1));
      if (n === 0) break;
    }
  } else {
    await call('sweep', (c) => body(c, 100));
  }
}

async function reconcile() {
  await call(
    'sweep',
    (c) =>
      c.query(
        `UPDATE belay_jobs p SET state = 'ready', ready_at = $1, await_scope = NULL, await_name = NULL
          WHERE p.state = 'awaiting' AND p.await_name = '$children' AND p.await_scope = 'job:' || p.id
            AND EXISTS (SELECT 1 FROM belay_jobs k WHERE k.parent_id = p.id)
            AND NOT EXISTS (SELECT 1 FROM belay_jobs k WHERE k.parent_id = p.id
                             AND k.state NOT IN ('succeeded', 'failed', 'cancelled'))`,
        [now()],
      ),
    { txn: false },
  );
}

// --- cron: five fields, UTC, whole-minute slots (sdk-guide §3)
const NAMES = {
  month: ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'],
  dow: ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'],
};
function parseField(s, lo, hi, names) {
  const set = new Set();
  const val = (x) => {
    const u = x.toUpperCase();
    if (names && names.includes(u)) return names.indexOf(u) + (names === NAMES.month ? 1 : 0);
    if (!/^\d+$/.test(x)) throw new Error(`bad cron value ${x}`);
    return parseInt(x, 10);
  };
  for (const part of s.split(',')) {
    const [range, stepS] = part.split('/');
    const stp = stepS === undefined ? 1 : parseInt(stepS, 10);
    if (!(stp >= 1)) throw new Error(`bad cron step ${part}`);
    let a;
    let b;
    if (range === '*') {
      a = lo;
      b = hi;
    } else if (range.includes('-')) {
      const [x, y] = range.split('-');
      a = val(x);
      b = val(y);
    } else {
      a = val(range);
      b = stepS === undefined ? a : hi;
    }
    for (let v = a; v <= b; v += stp) set.add(v);
  }
  return set;
}
function parseCron(expr) {
  const f = expr.trim().split(/\s+/);
  if (f.length !== 5) throw new Error(`cron expression needs five fields: ${expr}`);
  const dow = parseField(f[4], 0, 7, NAMES.dow);
  if (dow.has(7)) dow.add(0);
  return {
    minute: parseField(f[0], 0, 59),
    hour: parseField(f[1], 0, 23),
    dom: parseField(f[2], 1, 31),
    month: parseField(f[3], 1, 12, NAMES.month),
    dow,
    domStar: f[2] === '*' || f[2].startsWith('*/'),
    dowStar: f[4] === '*' || f[4].startsWith('*/'),
  };
}
function cronMatches(c, d) {
  if (!c.minute.has(d.getUTCMinutes()) || !c.hour.has(d.getUTCHours()) || !c.month.has(d.getUTCMonth() + 1)) return false;
  const domOk = c.dom.has(d.getUTCDate());
  const dowOk = c.dow.has(d.getUTCDay());
  if (c.domStar || c.dowStar) return domOk && dowOk;
  return domOk || dowOk;
}

let cronSince = null;
async function fireCrons() {
  const t = now();
  if (cronSince === null) cronSince = addMs(t, -60000);
  const rows = (
    await call('sweep', (c) => c.query('SELECT name, expression, worker, input, opts FROM belay_crons WHERE NOT paused ORDER BY name'), {
      txn: false,
    })
  ).rows;
  const slots = [];
  const first = Math.floor(cronSince.getTime() / 60000) + 1;
  const last = Math.floor(t.getTime() / 60000);
  for (const row of rows) {
    let cr;
    try {
      cr = parseCron(row.expression);
    } catch (e) {
      log(`cron ${row.name}: ${e.message}; skipped`);
      continue;
    }
    const opts = row.opts || {};
    for (let m = Math.max(first, last - 60); m <= last; m++) {
      const slot = new Date(m * 60000);
      if (cronMatches(cr, slot)) {
        slots.push({
          name: row.name,
          slot,
          worker: row.worker,
          input: row.input || {},
          queue: opts.queue || 'default',
          priority: opts.priority ?? 0,
          max_attempts: opts.max_attempts ?? 20,
        });
      }
    }
  }
  const insert = async (c, list) => {
    const vals = [];
    const args = [];
    for (const s of list) {
      const b = args.length;
      vals.push(
        `($${b + 1}, $${b + 2}, $${b + 3}::jsonb, $${b + 4}, $${b + 5}, 'ready', 0, '[]'::jsonb, 0, 0, false, $${b + 6}, $${b + 6}, $${b + 7}, $${b + 8})`,
      );
      args.push(s.queue, s.worker, JSON.stringify(s.input), s.priority, s.max_attempts, t, s.name, s.slot);
    }
    await c.query(
      `INSERT INTO belay_jobs (queue, worker, input, priority, max_attempts, state, attempt, errors, spent_usd_micros, spent_tokens,
                               cancel_requested, ready_at, inserted_at, cron_name, cron_slot)
       VALUES ${vals.join(', ')} ON CONFLICT DO NOTHING`,
      args,
    );
  };
  if (slots.length) {
    if (ALT.has('cron_each')) {
      for (const s of slots) await call('sweep', (c) => insert(c, [s]));
    } else {
      await call('sweep', (c) => insert(c, slots));
    }
  }
  cronSince = t; // only after a pass that succeeded: a failed pass is retried over the whole window
}

async function sweepLoop() {
  for (;;) {
    const started = Date.now();
    for (const [name, f] of [
      ['reclaim', reclaim],
      ['reconcile', reconcile],
      ['crons', fireCrons],
    ]) {
      try {
        await f();
      } catch (e) {
        log(`sweep ${name}: ${e.code || ''} ${e.message}`);
      }
    }
    await sleep(Math.max(SWEEP_MS - (Date.now() - started), 100));
  }
}

async function queueRefreshLoop() {
  for (;;) {
    await sleep(5000);
    try {
      await refreshQueues();
    } catch (e) {
      log(`queue refresh: ${e.message}`);
    }
  }
}

// ---------------------------------------------------------------- startup and shutdown
async function checkSchema() {
  const r = await call('claim', (c) => c.query('SELECT version, contract_major FROM belay_meta'), { txn: false });
  const row = r.rows[0];
  if (!row || row.contract_major > 1) throw new Error(`unsupported contract major ${row && row.contract_major}`);
  if (row.version < 3) throw new Error(`migration ${row.version} older than 3`);
}

process.on('SIGTERM', () => {
  if (draining) return;
  draining = true;
  log(`SIGTERM: stop claiming, drain ${running.size} running job(s) within ${GRACE_MS} ms`);
  for (const st of queueLoops.values()) st.poke();
  const deadline = Date.now() + GRACE_MS;
  (async () => {
    while (running.size > 0 && Date.now() < deadline) await sleep(50);
    log(`drained: ${running.size} job(s) left to lease expiry; exit 0`);
    process.exit(0);
  })();
});
process.on('uncaughtException', (e) => log(`uncaught: ${e.stack || e}`));
process.on('unhandledRejection', (e) => log(`unhandled rejection: ${(e && e.stack) || e}`));

async function main() {
  log(`starting: queues ${QUEUES.join(',')} ttl ${TTL}s offset ${OFFSET_MS}ms alt [${[...ALT].join(',')}]`);
  for (;;) {
    try {
      await checkSchema();
      await refreshQueues(); // apply belay_queues options from the first claim on (P18)
      break;
    } catch (e) {
      if (!isTransient(e)) throw e;
      log(`startup: ${e.message}; retrying`);
      await sleep(500);
    }
  }
  renewLoop();
  sweepLoop();
  queueRefreshLoop();
  for (const q of QUEUES) startQueue(q);
}

if (require.main === module) {
  main().catch((e) => {
    log(`fatal: ${e.stack || e}`);
    process.exit(1);
  });
} else {
  // required by tests/test_node_worker.py to pin the spellings and arithmetic trace validation compares
  module.exports = { iso, parseIso, roundHalfUp, parseCron, cronMatches };
}
