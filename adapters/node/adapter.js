#!/usr/bin/env node
// A small Belay SDK in Node.js behind the SDK adapter protocol v1 (docs/sdk-adapter.md).
// Written from docs/sdk-adapter.md and docs/spec/belay-wire-contract.txt: client operations (§1, §5,
// §8.1, §8.3, §8.6, §10 reads), plain claims (§6) and single fenced acks (§7), retention (§8.7).
// One JSON request per line on stdin, one JSON reply per line on stdout; logs on stderr.
//
// BELAY_ADAPTER_BUG=<name> plants one bug (README.md lists them) so the harness can be seen to kill it.
'use strict';

const readline = require('readline');
const { Client, types } = require('pg');

const BUG = process.env.BELAY_ADAPTER_BUG || '';
const BUGS = new Set([
  'claim-priority-desc', 'claim-nulls-last', 'claim-ignores-schedule', 'fence-ignores-attempt',
  'window-key-no-bucket', 'error-entry-next-attempt', 'holder-any-state', 'always-as-incomplete',
  'cancel-no-settle', 'retry-member-ready', 'settle-ignores-flags', 'wake-ignores-name',
  'signal-keeps-old-payload', 'envelope-null-as-sql-null', 'retry-keeps-cancel-request',
  'retry-keeps-max-attempts', 'cancel-running-terminal', 'fail-retries-past-max', 'steer-wrong-name',
  'children-not-notified', 'prune-live-workflow', 'tx-enqueue-autocommit', 'timestamps-as-date', 'tx-rollback-commits',
]);
if (BUG && !BUGS.has(BUG)) {
  process.stderr.write(`unknown BELAY_ADAPTER_BUG ${BUG}\n`);
  process.exit(2);
}

// --- values ---------------------------------------------------------------------------------------
// timestamptz as text (a JS Date would lose the microseconds), rendered as ISO-8601 with offset.
function isoFromPg(text) {
  const m = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(\.\d+)?([+-]\d{2})(:?\d{2})?$/.exec(text);
  if (!m) return text;
  const frac = m[3] ? '.' + m[3].slice(1).padEnd(6, '0') : '';
  const off = m[4] + ':' + (m[5] ? m[5].replace(':', '') : '00');
  return `${m[1]}T${m[2]}${frac}${off}`;
}
types.setTypeParser(1184, BUG === 'timestamps-as-date' ? (t) => new Date(t).toISOString() : isoFromPg); // timestamptz
types.setTypeParser(20, (v) => Number(v)); // int8: ids and money fit in a double here

const JOB_COLUMNS = [
  'id', 'queue', 'worker', 'input', 'meta', 'state', 'priority', 'attempt', 'max_attempts', 'ready_at',
  'inserted_at', 'started_at', 'finished_at', 'lease_until', 'leased_by', 'errors', 'result',
  'cancel_requested', 'unique_key', 'unique_mode', 'cron_name', 'cron_slot', 'workflow_id', 'wf_name',
  'wf_deps', 'wf_ignore', 'parent_id', 'await_scope', 'await_name', 'budget_usd_micros', 'budget_tokens',
  'spent_usd_micros', 'spent_tokens',
];
const COLS = JOB_COLUMNS.join(', ');
const TERMINAL = ['succeeded', 'failed', 'cancelled'];
const INCOMPLETE = ['ready', 'running', 'awaiting', 'held', 'paused'];
const INT4_MAX = 2147483647;

function jobOut(row) {
  const out = { type: 'Job' };
  for (const c of JOB_COLUMNS) {
    let v = row[c];
    if (c === 'result' && v !== null) v = Buffer.from(v).toString('base64');
    out[c] = v === undefined ? null : v;
  }
  return out;
}

class Refused extends Error {
  constructor(errorClass, message) {
    super(message);
    this.errorClass = errorClass;
  }
}
const invalid = (m) => new Refused('InvalidInput', m);

// §2 envelope: compact UTF-8 JSON
function envelope(value) {
  return Buffer.from(JSON.stringify(value === undefined ? null : value), 'utf8');
}

// --- the SDK --------------------------------------------------------------------------------------
class Sdk {
  constructor(url) {
    this.url = url;
    this.db = null; // the SDK's own connection (autocommit unless inside tx())
    this.caller = null; // the caller's transaction (transactional enqueue)
  }

  async open() {
    this.db = new Client({ connectionString: this.url });
    await this.db.connect();
    await this.db.query("SET TIME ZONE 'UTC'");
  }

  async close() {
    if (this.caller) await this.caller.end().catch(() => {});
    if (this.db) await this.db.end().catch(() => {});
  }

  async tx(fn) {
    await this.db.query('BEGIN');
    try {
      const out = await fn(this.db);
      await this.db.query('COMMIT');
      return out;
    } catch (e) {
      await this.db.query('ROLLBACK').catch(() => {});
      throw e;
    }
  }

  // §1
  async CheckCompat(a) {
    const { rows } = await this.db.query('SELECT version, contract_major FROM belay_meta');
    const { version, contract_major: major } = rows[0];
    if (major > a.known_major) throw new Refused('IncompatibleSchema', `contract major ${major} is newer than ${a.known_major}`);
    if (version < a.min_version) throw new Refused('IncompatibleSchema', `migration ${version} is older than ${a.min_version}`);
    return { type: 'Compatible', version, contract_major: major };
  }

  // §5.1 / §5.2
  async insertRows(c, now, rows) {
    const { rows: idRows } = await c.query(
      "SELECT nextval('belay_jobs_id_seq') AS id FROM generate_series(1, $1::int) ORDER BY 1", [rows.length]);
    const ids = idRows.map((r) => r.id);
    const params = [];
    const values = [];
    rows.forEach((r, i) => {
      const p = (v) => { params.push(v); return `$${params.length}`; };
      values.push(`(${p(ids[i])}::bigint, ${p(r.queue)}, ${p(r.worker)}, ${p(JSON.stringify(r.input))}::jsonb, ` +
        `${p(JSON.stringify(r.meta))}::jsonb, ${p(r.state)}, ${p(r.priority)}::int, 0, ${p(r.max_attempts)}::int, ` +
        `${p(r.scheduled_at || now)}::timestamptz, ${p(now)}::timestamptz, '[]'::jsonb, false, ${p(r.unique_key)}, ` +
        `${p(r.unique_mode)}, ${p(r.cron_name)}, ${p(r.cron_slot)}::timestamptz, ${p(r.workflow_id || null)}, ` +
        `${p(r.wf_name || null)}, ${p(r.wf_deps || null)}::text[], ${p(r.wf_ignore || null)}::text[], ` +
        `${p(r.parent_id)}::bigint, ${p(r.budget_usd_micros)}::bigint, ${p(r.budget_tokens)}::bigint, 0, 0)`);
    });
    const { rows: inserted } = await c.query(
      'INSERT INTO belay_jobs (id, queue, worker, input, meta, state, priority, attempt, max_attempts, ready_at, ' +
      'inserted_at, errors, cancel_requested, unique_key, unique_mode, cron_name, cron_slot, workflow_id, wf_name, ' +
      'wf_deps, wf_ignore, parent_id, budget_usd_micros, budget_tokens, spent_usd_micros, spent_tokens) VALUES ' +
      values.join(', ') + ' ON CONFLICT DO NOTHING RETURNING id', params);
    const got = new Set(inserted.map((r) => r.id));
    const outcomes = [];
    for (let i = 0; i < rows.length; i++) {
      if (got.has(ids[i])) { outcomes.push({ type: 'Inserted', id: ids[i] }); continue; }
      outcomes.push(await this.duplicate(c, rows[i]));
    }
    return outcomes;
  }

  async duplicate(c, r) {
    if (r.cron_name !== null) {
      const { rows } = await c.query('SELECT id FROM belay_jobs WHERE cron_name = $1 AND cron_slot = $2::timestamptz', [r.cron_name, r.cron_slot]);
      if (rows.length) return { type: 'Duplicate', id: rows[0].id, reason: 'cron' };
    }
    if (r.unique_key === null) return { type: 'Duplicate', id: null, reason: 'cron' };
    let predicate = r.unique_mode === 'incomplete'
      ? "unique_mode = 'incomplete' AND state = ANY($2::text[])"
      : "unique_mode IN ('window', 'always') AND $2::text[] IS NOT NULL";
    if (BUG === 'holder-any-state') predicate = '$2::text[] IS NOT NULL';
    const order = 'DESC';
    const { rows } = await c.query(
      `SELECT id FROM belay_jobs WHERE unique_key = $1 AND ${predicate} ORDER BY id ${order} LIMIT 1`, [r.unique_key, INCOMPLETE]);
    return { type: 'Duplicate', id: rows.length ? rows[0].id : null, reason: 'unique' };
  }

  async row(c, spec, now) {
    let key = spec.unique_key;
    let mode = spec.unique_mode;
    if (key !== null && mode === null) mode = 'incomplete';
    if (BUG === 'always-as-incomplete' && mode === 'always') mode = 'incomplete';
    if (mode === 'window' && BUG !== 'window-key-no-bucket') {
      const { rows } = await c.query(
        'SELECT floor(extract(epoch FROM $1::timestamptz) / $2::numeric)::bigint AS b', [now, spec.unique_window]);
      key = `${key}@${rows[0].b}`;
    }
    return { ...spec, unique_key: key, unique_mode: mode, state: 'ready' };
  }

  async Enqueue(a, caller) {
    const run = async (c) => {
      const rows = [];
      for (const spec of a.jobs) rows.push(await this.row(c, spec, a.now));
      return { type: 'Enqueued', outcomes: await this.insertRows(c, a.now, rows) };
    };
    if (caller) return run(BUG === 'tx-enqueue-autocommit' ? this.db : caller);
    return this.tx(run);
  }

  // §8.3
  async EnqueueWorkflow(a, caller) {
    const run = async (c) => {
      await c.query("SELECT pg_advisory_xact_lock(hashtext('belay_wf:' || $1))", [a.workflow_id]);
      const { rows: have } = await c.query('SELECT wf_name FROM belay_jobs WHERE workflow_id = $1 AND wf_name IS NOT NULL', [a.workflow_id]);
      checkGraph(a.workflow_id, a.members, have.map((r) => r.wf_name));
      const rows = [];
      for (const m of a.members) {
        const r = await this.row(c, m.job, a.now);
        rows.push({ ...r, state: m.deps.length ? 'held' : 'ready', workflow_id: a.workflow_id, wf_name: m.name, wf_deps: m.deps, wf_ignore: m.ignore });
      }
      const outcomes = await this.insertRows(c, a.now, rows);
      const { released, doomed } = await this.settle(c, a.workflow_id, a.now);
      await this.notifyParents(c, a.now, doomed);
      return {
        type: 'WorkflowEnqueued', workflow_id: a.workflow_id,
        ids: a.members.map((m, i) => [m.name, outcomes[i].id]), released, doomed: doomed.map((d) => d.id),
      };
    };
    return caller ? run(caller) : this.tx(run);
  }

  // settlement fixpoint (§8.3); the caller holds the workflow lock. Returns released ids and doomed rows.
  async settle(c, workflowId, now) {
    const { rows } = await c.query(
      'SELECT id, wf_name, state, wf_deps, wf_ignore, parent_id FROM belay_jobs WHERE workflow_id = $1 AND wf_name IS NOT NULL FOR UPDATE',
      [workflowId]);
    const states = new Map(rows.map((r) => [r.wf_name, r.state]));
    const candidates = rows.filter((r) => r.state === 'held' && r.wf_deps && r.wf_deps.length)
      .sort((x, y) => (x.wf_name < y.wf_name ? -1 : 1));
    const released = new Set();
    const doomed = new Set();
    let changed = true;
    while (changed) {
      changed = false;
      for (const m of candidates) {
        if (released.has(m.wf_name) || doomed.has(m.wf_name)) continue;
        let verdict = 'release';
        for (const dep of m.wf_deps) {
          const s = states.get(dep);
          if (s === 'succeeded') continue;
          if (s === 'failed' || s === 'cancelled') {
            if ((m.wf_ignore || []).includes(s) && BUG !== 'settle-ignores-flags') continue;
            verdict = 'doom';
            break;
          }
          verdict = null;
        }
        if (verdict === 'doom') { doomed.add(m.wf_name); states.set(m.wf_name, 'cancelled'); changed = true; }
        else if (verdict === 'release') { released.add(m.wf_name); states.set(m.wf_name, 'ready'); changed = true; }
      }
    }
    const byName = new Map(rows.map((r) => [r.wf_name, r]));
    const rel = [...released].map((n) => byName.get(n).id).sort((x, y) => x - y);
    const doo = [...doomed].map((n) => byName.get(n)).sort((x, y) => x.id - y.id);
    if (rel.length) await c.query("UPDATE belay_jobs SET state = 'ready' WHERE id = ANY($1::bigint[]) AND state = 'held'", [rel]);
    if (doo.length) {
      await c.query("UPDATE belay_jobs SET state = 'cancelled', finished_at = $2::timestamptz WHERE id = ANY($1::bigint[]) AND state = 'held'",
        [doo.map((d) => d.id), now]);
    }
    return { released: rel, doomed: doo };
  }

  // §7 after a terminal write: settle the workflow (lock first), then $children to parents, unconditionally
  async afterTerminal(c, now, job) {
    const children = [{ id: job.id, parent_id: job.parent_id }];
    if (job.workflow_id !== null) {
      const { doomed } = await this.settle(c, job.workflow_id, now);
      children.push(...doomed);
    }
    await this.notifyParents(c, now, children);
  }

  async notifyParents(c, now, children) {
    if (BUG === 'children-not-notified') return;
    const byParent = new Map();
    for (const ch of children) {
      if (ch.parent_id === null || ch.parent_id === undefined) continue;
      if (!byParent.has(ch.parent_id)) byParent.set(ch.parent_id, []);
      byParent.get(ch.parent_id).push(ch.id);
    }
    for (const parent of [...byParent.keys()].sort((x, y) => x - y)) {
      await this.deliver(c, now, `job:${parent}`, '$children', { children: byParent.get(parent).sort((x, y) => x - y) });
    }
  }

  // §8.1: under the scope lock, upsert the signal, then wake its awaiters
  async deliver(c, now, scope, name, payload) {
    await c.query("SELECT pg_advisory_xact_lock(hashtext('belay_sig:' || $1))", [scope]);
    const conflict = BUG === 'signal-keeps-old-payload' ? 'DO NOTHING' : 'DO UPDATE SET payload = EXCLUDED.payload, inserted_at = EXCLUDED.inserted_at';
    await c.query(
      `INSERT INTO belay_signals (scope, name, payload, inserted_at) VALUES ($1, $2, $3::jsonb, $4::timestamptz) ON CONFLICT (scope, name) ${conflict}`,
      [scope, name, JSON.stringify(payload === undefined ? null : payload), now]);
    const match = BUG === 'wake-ignores-name' ? 'await_scope = $1 AND $2::text IS NOT NULL' : 'await_scope = $1 AND await_name = $2';
    const { rows } = await c.query(
      `UPDATE belay_jobs SET state = 'ready', ready_at = $3::timestamptz, await_scope = NULL, await_name = NULL WHERE state = 'awaiting' AND ${match} RETURNING id`,
      [scope, name, now]);
    return rows.map((r) => r.id).sort((x, y) => x - y);
  }

  async DeliverSignal(a) {
    return this.tx(async (c) => ({ type: 'Signalled', woken: await this.deliver(c, a.now, a.scope, a.name, a.payload) }));
  }

  async Steer(a) {
    return this.tx(async (c) => {
      const { rows } = await c.query('SELECT 1 FROM belay_jobs WHERE id = $1', [a.job_id]);
      if (!rows.length) return { type: 'NotFound', job_id: a.job_id };
      const name = BUG === 'steer-wrong-name' ? 'steer' : '$steer';
      return { type: 'Signalled', woken: await this.deliver(c, a.now, `job:${a.job_id}`, name, a.payload) };
    });
  }

  async ClearSignal(a) {
    const { rowCount } = await this.db.query('DELETE FROM belay_signals WHERE scope = $1 AND name = $2', [a.scope, a.name]);
    return { type: 'Cleared', existed: rowCount > 0 };
  }

  // §8.6: lock order workflow lock -> row lock -> scope lock
  async lockJob(c, jobId) {
    const { rows: wf } = await c.query('SELECT workflow_id FROM belay_jobs WHERE id = $1', [jobId]);
    if (!wf.length) return null;
    if (wf[0].workflow_id !== null) await c.query("SELECT pg_advisory_xact_lock(hashtext('belay_wf:' || $1))", [wf[0].workflow_id]);
    const { rows } = await c.query(`SELECT ${COLS} FROM belay_jobs WHERE id = $1 FOR UPDATE`, [jobId]);
    return rows[0] || null;
  }

  async Cancel(a) {
    return this.tx(async (c) => {
      const job = await this.lockJob(c, a.job_id);
      if (!job) return { type: 'NotFound', job_id: a.job_id };
      if (TERMINAL.includes(job.state)) return { type: 'NotCancellable', job_id: a.job_id, state: job.state };
      if (job.state === 'running' && BUG !== 'cancel-running-terminal') {
        await c.query('UPDATE belay_jobs SET cancel_requested = true WHERE id = $1', [a.job_id]);
        return { type: 'CancelRequested', job_id: a.job_id };
      }
      await c.query(
        "UPDATE belay_jobs SET state = 'cancelled', finished_at = $2::timestamptz, lease_until = NULL, leased_by = NULL, await_scope = NULL, await_name = NULL WHERE id = $1",
        [a.job_id, a.now]);
      if (BUG === 'cancel-no-settle') await this.notifyParents(c, a.now, [job]);
      else await this.afterTerminal(c, a.now, job);
      return { type: 'Cancelled', job_id: a.job_id };
    });
  }

  async Retry(a) {
    return this.tx(async (c) => {
      const job = await this.lockJob(c, a.job_id);
      if (!job) return { type: 'NotFound', job_id: a.job_id };
      if (job.state !== 'failed' && job.state !== 'cancelled') return { type: 'NotRetryable', job_id: a.job_id, state: job.state };
      if (job.unique_mode === 'incomplete' && job.unique_key !== null) {
        const { rows } = await c.query(
          "SELECT id FROM belay_jobs WHERE unique_key = $1 AND unique_mode = 'incomplete' AND state = ANY($2::text[]) AND id <> $3 ORDER BY id DESC LIMIT 1",
          [job.unique_key, INCOMPLETE, job.id]);
        if (rows.length) return { type: 'RetryBlocked', job_id: a.job_id, holder_id: rows[0].id };
      }
      const deps = job.wf_deps || [];
      if (deps.length) {
        const { rows } = await c.query('SELECT wf_name FROM belay_jobs WHERE workflow_id = $1', [job.workflow_id]);
        const names = new Set(rows.map((r) => r.wf_name));
        const missing = deps.filter((d) => !names.has(d));
        if (missing.length) return { type: 'DepsGone', job_id: a.job_id, missing };
      }
      const state = deps.length && BUG !== 'retry-member-ready' ? 'held' : 'ready';
      const cancel = BUG === 'retry-keeps-cancel-request' ? 'cancel_requested' : 'false';
      const maxAttempts = BUG === 'retry-keeps-max-attempts' ? 'max_attempts' : 'GREATEST(max_attempts, attempt + 1)';
      await c.query(
        `UPDATE belay_jobs SET state = $2, ready_at = $3::timestamptz, cancel_requested = ${cancel}, max_attempts = ${maxAttempts}, ` +
        'lease_until = NULL, leased_by = NULL, finished_at = NULL WHERE id = $1', [a.job_id, state, a.now]);
      if (job.workflow_id !== null) {
        const { doomed } = await this.settle(c, job.workflow_id, a.now);
        await this.notifyParents(c, a.now, doomed);
      }
      const { rows } = await c.query('SELECT state FROM belay_jobs WHERE id = $1', [a.job_id]);
      return { type: 'Retried', job_id: a.job_id, state: rows[0].state };
    });
  }

  async PutQueue(a) {
    await this.db.query(
      'INSERT INTO belay_queues (name, opts, updated_at) VALUES ($1, $2::jsonb, $3::timestamptz) ON CONFLICT (name) DO UPDATE SET opts = EXCLUDED.opts, updated_at = EXCLUDED.updated_at',
      [a.name, JSON.stringify(a.opts), a.now]);
    return { type: 'QueuePut', name: a.name };
  }

  async PutCron(a) {
    await this.db.query(
      'INSERT INTO belay_crons (name, expression, worker, input, opts, paused, updated_at) VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7::timestamptz) ' +
      'ON CONFLICT (name) DO UPDATE SET expression = EXCLUDED.expression, worker = EXCLUDED.worker, input = EXCLUDED.input, opts = EXCLUDED.opts, paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at',
      [a.name, a.expression, a.worker, JSON.stringify(a.input), JSON.stringify(a.opts), a.paused, a.now]);
    return { type: 'CronPut', name: a.name };
  }

  // reads (§10)
  async ReadJob(a) {
    const { rows } = await this.db.query(`SELECT ${COLS} FROM belay_jobs WHERE id = $1`, [a.job_id]);
    return rows.length ? jobOut(rows[0]) : { type: 'NotFound', job_id: a.job_id };
  }

  async ReadWorkflow(a) {
    const { rows } = await this.db.query(`SELECT ${COLS} FROM belay_jobs WHERE workflow_id = $1 ORDER BY id`, [a.workflow_id]);
    return rows.map(jobOut);
  }

  async ReadSteps(a) {
    const { rows } = await this.db.query(
      'SELECT job_id, seq, name, value, usd_micros, tokens, inserted_at FROM belay_steps WHERE job_id = $1 ORDER BY seq', [a.job_id]);
    return rows.map((r) => ({ type: 'Step', ...r, value: Buffer.from(r.value).toString('base64') }));
  }

  async ReadEvents(a) {
    const { rows } = await this.db.query('SELECT job_id, seq, payload, inserted_at FROM belay_events WHERE job_id = $1 ORDER BY seq', [a.job_id]);
    return rows.map((r) => ({ type: 'Event', ...r }));
  }

  async ReadSignals(a) {
    const { rows } = await this.db.query(
      'SELECT scope, name, payload, inserted_at FROM belay_signals WHERE scope = ANY($1::text[]) ORDER BY scope, name', [a.scopes]);
    return rows.map((r) => ({ type: 'Signal', ...r }));
  }

  // §6: plain queues only (admission limits answer Unsupported)
  async Claim(a) {
    const o = a.opts;
    if (o.global_limit !== null || o.rate !== null || o.partition !== null) {
      throw new Refused('Unsupported', 'this SDK claims plain queues only');
    }
    if (a.demand === 0) return { type: 'Claimed', jobs: [] };
    return this.tx(async (c) => {
      const due = BUG === 'claim-ignores-schedule' ? 'true' : '(ready_at IS NULL OR ready_at <= $2::timestamptz)';
      const order = `priority ${BUG === 'claim-priority-desc' ? 'DESC' : 'ASC'}, ready_at ASC ${BUG === 'claim-nulls-last' ? 'NULLS LAST' : 'NULLS FIRST'}, id ASC`;
      const { rows: picked } = await c.query(
        `SELECT id FROM belay_jobs WHERE queue = $1 AND ((state = 'ready' AND ${due}) OR (state = 'awaiting' AND ready_at <= $2::timestamptz)) ` +
        `ORDER BY ${order} LIMIT $3 FOR UPDATE SKIP LOCKED`, [a.queue, a.now, a.demand]);
      const ids = picked.map((r) => r.id);
      if (!ids.length) return { type: 'Claimed', jobs: [] };
      const { rows } = await c.query(
        "UPDATE belay_jobs SET state = 'running', attempt = attempt + 1, lease_until = $2::timestamptz + make_interval(secs => $3::float8), " +
        `leased_by = $4, started_at = COALESCE(started_at, $2::timestamptz) WHERE id = ANY($1::bigint[]) RETURNING ${COLS}`,
        [ids, a.now, a.lease_ttl, a.node]);
      const byId = new Map(rows.map((r) => [r.id, r]));
      return { type: 'Claimed', jobs: ids.map((id) => jobOut(byId.get(id))) };
    });
  }

  // §7: one fenced ack
  async Ack(a) {
    return this.tx(async (c) => {
      const fence = BUG === 'fence-ignores-attempt' ? '$2::int IS NOT NULL' : 'attempt = $2';
      const { rows } = await c.query(
        `SELECT ${COLS} FROM belay_jobs WHERE id = $1 AND state = 'running' AND ${fence} FOR UPDATE`, [a.job_id, a.attempt]);
      if (!rows.length) return { type: 'Stale', job_id: a.job_id, attempt: a.attempt };
      const job = rows[0];
      const o = a.outcome;
      const lease = 'lease_until = NULL, leased_by = NULL';
      let state;
      if (o.type === 'Succeed') {
        state = 'succeeded';
        const result = BUG === 'envelope-null-as-sql-null' && o.value === null ? null : envelope(o.value);
        await c.query(`UPDATE belay_jobs SET state = $2, result = $3, finished_at = $4::timestamptz, ${lease} WHERE id = $1`, [job.id, state, result, a.now]);
      } else if (o.type === 'Fail') {
        const entry = { attempt: job.attempt + (BUG === 'error-entry-next-attempt' ? 1 : 0), at: a.now, error: o.error, detail: clampDetail(o.detail) };
        const retry = o.retry_at !== null && (job.attempt < job.max_attempts || BUG === 'fail-retries-past-max');
        state = retry ? 'ready' : 'failed';
        await c.query(
          `UPDATE belay_jobs SET state = $2, errors = errors || jsonb_build_array($3::jsonb), ready_at = CASE WHEN $2 = 'ready' THEN $4::timestamptz ELSE ready_at END, ` +
          `finished_at = CASE WHEN $2 = 'failed' THEN $5::timestamptz ELSE finished_at END, ${lease} WHERE id = $1`,
          [job.id, state, JSON.stringify(entry), o.retry_at, a.now]);
      } else if (o.type === 'CancelSelf') {
        state = 'cancelled';
        await c.query(`UPDATE belay_jobs SET state = 'cancelled', finished_at = $2::timestamptz, ${lease} WHERE id = $1`, [job.id, a.now]);
      } else if (o.type === 'Snooze') {
        if (job.max_attempts + 1 > INT4_MAX) throw new Refused('Overflow', 'max_attempts + 1 overflows the integer column');
        state = 'ready';
        await c.query(`UPDATE belay_jobs SET state = 'ready', ready_at = $2::timestamptz, max_attempts = max_attempts + 1, ${lease} WHERE id = $1`, [job.id, o.until]);
      } else {
        throw invalid(`unknown outcome ${o.type}`);
      }
      if (TERMINAL.includes(state)) await this.afterTerminal(c, a.now, job);
      return { type: 'Acked', job_id: job.id, state };
    });
  }

  // §8.7
  async Prune(a) {
    return this.tx(async (c) => {
      const clauses = [];
      const params = [a.now, a.limit];
      for (const s of TERMINAL) {
        const keep = a.retention[s];
        if (keep === undefined || keep === null) continue;
        params.push(s, keep);
        clauses.push(`(state = $${params.length - 1} AND finished_at < $1::timestamptz - make_interval(secs => $${params.length}::float8))`);
      }
      let jobs = [];
      if (clauses.length) {
        const live = BUG === 'prune-live-workflow' ? '' :
          'AND (workflow_id IS NULL OR workflow_id NOT IN (SELECT workflow_id FROM belay_jobs WHERE workflow_id IS NOT NULL AND state <> ALL(ARRAY[\'succeeded\',\'failed\',\'cancelled\'])))';
        const { rows } = await c.query(
          `SELECT id FROM belay_jobs WHERE finished_at IS NOT NULL AND (${clauses.join(' OR ')}) ${live} ORDER BY id LIMIT $2 FOR UPDATE`, params);
        jobs = rows.map((r) => r.id);
        if (jobs.length) {
          await c.query('DELETE FROM belay_steps WHERE job_id = ANY($1::bigint[])', [jobs]);
          await c.query('DELETE FROM belay_events WHERE job_id = ANY($1::bigint[])', [jobs]);
          await c.query('DELETE FROM belay_jobs WHERE id = ANY($1::bigint[])', [jobs]);
        }
      }
      let signals = 0;
      if (a.signal_ttl !== null) {
        const r = await c.query('DELETE FROM belay_signals WHERE inserted_at < $1::timestamptz - make_interval(secs => $2::float8)', [a.now, a.signal_ttl]);
        signals = r.rowCount;
      }
      const rate = await c.query("DELETE FROM belay_rate WHERE window_start < $1::timestamptz - interval '1 day'", [a.now]);
      return { type: 'Pruned', jobs, signals, rate_windows: rate.rowCount };
    });
  }
}

function clampDetail(detail) {
  if (detail === null || detail === undefined) return null;
  const raw = Buffer.from(detail, 'utf8');
  if (raw.length <= 8192) return detail;
  let text = raw.subarray(0, 8192).toString('utf8');
  if (text.endsWith('\uFFFD')) text = text.replace(/\uFFFD+$/, '');
  return text;
}

function checkGraph(workflowId, members, existing) {
  const names = members.map((m) => m.name);
  const have = new Set(existing);
  const clash = names.filter((n) => have.has(n)).sort();
  if (clash.length) throw invalid(`workflow ${workflowId} already has members named ${clash}`);
  const known = new Set([...names, ...existing]);
  for (const m of members) {
    const missing = m.deps.filter((d) => !known.has(d));
    if (missing.length) throw invalid(`workflow ${workflowId}: member ${m.name} depends on ${missing}, which name no member`);
  }
  const deps = new Map(members.map((m) => [m.name, m.deps.filter((d) => names.includes(d))]));
  const state = new Map();
  const visit = (n) => {
    if (state.get(n) === 'done') return;
    if (state.get(n) === 'active') throw invalid(`workflow ${workflowId} has a dependency cycle through ${n}`);
    state.set(n, 'active');
    for (const d of deps.get(n) || []) visit(d);
    state.set(n, 'done');
  };
  names.forEach(visit);
}

// --- the protocol ---------------------------------------------------------------------------------
const OPS = [
  'CheckCompat', 'Enqueue', 'EnqueueWorkflow', 'DeliverSignal', 'Steer', 'ClearSignal', 'Cancel', 'Retry',
  'PutQueue', 'PutCron', 'ReadJob', 'ReadSteps', 'ReadEvents', 'ReadWorkflow', 'ReadSignals', 'Claim', 'Ack', 'Prune',
];
const ENQUEUES = new Set(['Enqueue', 'EnqueueWorkflow']);

async function main() {
  let sdk = null;
  const out = (reply) => process.stdout.write(JSON.stringify(reply) + '\n');
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let req;
    try {
      req = JSON.parse(line);
    } catch (e) {
      out({ id: null, ok: false, error: 'InvalidInput', message: 'not JSON' });
      continue;
    }
    const reply = (body) => out({ id: req.id, ...body });
    try {
      if (req.op === 'hello') {
        if (req.version !== 1) { reply({ ok: false, error: 'Unsupported', message: 'protocol 1 only' }); continue; }
        sdk = new Sdk(req.database_url);
        await sdk.open();
        reply({ ok: true, result: { protocol: 1, sdk: 'belay-node-adapter 0.1 (pg)', level: 'client', ops: OPS, transactions: true } });
        continue;
      }
      if (req.op === 'bye') break;
      if (!sdk) throw invalid('the first request must be hello');
      if (req.op === 'begin') {
        if (sdk.caller) throw invalid('a transaction is already open');
        sdk.caller = new Client({ connectionString: sdk.url });
        await sdk.caller.connect();
        await sdk.caller.query("SET TIME ZONE 'UTC'");
        await sdk.caller.query('BEGIN');
        reply({ ok: true, result: null });
        continue;
      }
      if (req.op === 'app_row') {
        if (!sdk.caller) throw invalid('app_row needs an open transaction');
        await sdk.caller.query('INSERT INTO belay_adapter_app (key) VALUES ($1)', [req.key]);
        reply({ ok: true, result: null });
        continue;
      }
      if (req.op === 'commit' || req.op === 'rollback') {
        if (!sdk.caller) throw invalid(`${req.op} without an open transaction`);
        const c = sdk.caller;
        sdk.caller = null;
        try { await c.query(req.op === 'commit' || BUG === 'tx-rollback-commits' ? 'COMMIT' : 'ROLLBACK'); } finally { await c.end(); }
        reply({ ok: true, result: null });
        continue;
      }
      if (!OPS.includes(req.op)) throw new Refused('Unsupported', `${req.op} is not implemented`);
      let caller = null;
      if (req.tx) {
        if (!ENQUEUES.has(req.op)) throw invalid(`${req.op} cannot run in a caller's transaction; only enqueues can`);
        if (!sdk.caller) throw invalid('tx: true but no transaction is open');
        caller = sdk.caller;
      }
      const result = await sdk[req.op](req.args, caller);
      reply({ ok: true, result });
    } catch (e) {
      if (e instanceof Refused) reply({ ok: false, error: e.errorClass, message: e.message });
      else reply({ ok: false, error: 'Internal', message: `${e.message}\n${e.stack || ''}` });
    }
  }
  if (sdk) await sdk.close();
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
