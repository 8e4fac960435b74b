# frozen_string_literal: true

# A Belay soak worker in Ruby (soak/PROTOCOL.md), written from the documents only:
# soak/PROTOCOL.md, docs/spec/belay-wire-contract.txt, docs/spec/belay-operations.txt,
# docs/decisions.md, docs/sdk-guide.md, docs/connections.md, docs/certification.md.
# Standard library + the `pg` gem (Debian: ruby-pg). See README.md beside this file.

require 'json'
require 'pg'
require 'securerandom'
require 'socket'
require 'time'

$stdout.sync = true
$stderr.sync = true

# ---------------------------------------------------------------- configuration and clock

module Cfg
  URL = ENV.fetch('BELAY_DATABASE_URL')
  NODE = ENV.fetch('BELAY_NODE', "ruby-#{Process.pid}")
  QUEUES = ENV.fetch('BELAY_QUEUES', 'soak').split(',').map(&:strip).reject(&:empty?)
  TTL = Float(ENV.fetch('BELAY_LEASE_TTL', '10'))
  OFFSET = Float(ENV['BELAY_CLOCK_OFFSET'].to_s.empty? ? '0' : ENV['BELAY_CLOCK_OFFSET'])
  # connections.md: a client-side deadline per call, max(ttl/4, 2 s).
  CALL_TIMEOUT = [TTL / 4.0, 2.0].max
  RENEW_EVERY = TTL / 3.0
  SWEEP_EVERY = 1.0 # PROTOCOL §1: at least every 2 s
  QUEUE_REFRESH = 5.0 # decisions.md: a node re-reads belay_queues at least every few seconds
  DEFAULT_LIMIT = 10 # decisions.md: `limit` default 10
  GRACE = 12.0 # PROTOCOL §1: 10..15 s
  POOL_SIZE = 8
  MAX_BACKOFF = 2.0
end

# Every `now` the worker sends: the wall clock plus BELAY_CLOCK_OFFSET (PROTOCOL §1).
def now
  Time.now + Cfg::OFFSET
end

def mono
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# ISO-8601 with microseconds and Z (certification.md "Allowed alternatives": any ISO-8601 spelling).
def iso(t)
  t.getutc.strftime('%Y-%m-%dT%H:%M:%S.%6NZ')
end

def log(msg)
  warn "#{Time.now.utc.strftime('%H:%M:%S.%L')} #{Cfg::NODE} #{msg}"
end

def jdump(v)
  JSON.generate(v)
end

# ---------------------------------------------------------------- connections with deadlines

class Transient < StandardError; end
class DeadlineExceeded < Transient; end

TRANSIENT_STATES = %w[40001 40P01 57P01 57P02 57P03 53300 55P03 57014 25P03].freeze

def transient?(err)
  case err
  when Transient, PG::ConnectionBad, PG::UnableToSend, IOError, SystemCallError, SocketError then true
  when PG::Error
    st = begin
      err.result&.error_field(PG::PG_DIAG_SQLSTATE)
    rescue StandardError
      nil
    end
    return true if st.nil? # a driver-level failure without a SQLSTATE: the connection went away
    TRANSIENT_STATES.include?(st) || st.start_with?('08')
  else
    false
  end
end

# One PostgreSQL connection whose every call is bounded by a client-side deadline: on expiry the
# socket is shut down (never a cancel request over the stalled path) and the connection discarded.
class Conn
  def initialize(label)
    @label = label
    @pg = nil
    @deadline = nil
  end

  def conninfo
    {
      connect_timeout: 3,
      keepalives: 1, keepalives_idle: 10, keepalives_interval: 3, keepalives_count: 3,
      tcp_user_timeout: 20_000,
      application_name: "#{Cfg::NODE}-#{@label}",
      options: "-c idle_in_transaction_session_timeout=#{(2 * Cfg::CALL_TIMEOUT * 1000).to_i} " \
               "-c statement_timeout=#{(2 * Cfg::CALL_TIMEOUT * 1000).to_i}"
    }
  end

  def connect!
    start = mono
    c = PG::Connection.connect_start(Cfg::URL, **conninfo)
    raise PG::ConnectionBad, 'connect_start failed' if c.nil?
    status = PG::PGRES_POLLING_WRITING
    until status == PG::PGRES_POLLING_OK
      raise PG::ConnectionBad, c.error_message if status == PG::PGRES_POLLING_FAILED
      remaining = [@deadline - mono, 3.0 - (mono - start)].min
      if remaining <= 0
        close_pg(c)
        raise DeadlineExceeded, "connect deadline (#{@label})"
      end
      io = c.socket_io
      ready = if status == PG::PGRES_POLLING_READING
                io.wait_readable(remaining)
              else
                io.wait_writable(remaining)
              end
      unless ready
        close_pg(c)
        raise DeadlineExceeded, "connect deadline (#{@label})"
      end
      status = c.connect_poll
    end
    c.setnonblocking(false)
    @pg = c
  end

  def close_pg(c)
    begin
      s = Socket.for_fd(c.socket)
      s.autoclose = false
      s.shutdown(Socket::SHUT_RDWR)
    rescue StandardError
      nil
    end
    begin
      c.finish
    rescue StandardError
      nil
    end
  end

  def discard!
    close_pg(@pg) if @pg
    @pg = nil
  end

  def begin_call(timeout)
    @deadline = mono + timeout
    connect! if @pg.nil? || @pg.finished? || @pg.status != PG::CONNECTION_OK
  end

  def end_call
    @deadline = nil
  end

  # Run one statement under the call's deadline.
  def q(sql, params = [])
    @pg.send_query_params(sql, params)
    loop do
      @pg.consume_input
      break unless @pg.is_busy
      remaining = @deadline - mono
      raise DeadlineExceeded, "call deadline (#{@label})" if remaining <= 0
      raise DeadlineExceeded, "call deadline (#{@label})" unless @pg.socket_io.wait_readable(remaining)
    end
    last = nil
    while (r = @pg.get_result)
      begin
        r.check
      rescue StandardError
        # drain the remaining results before raising
        while (x = @pg.get_result)
          x.clear
        end
        raise
      end
      last&.clear
      last = r
    end
    last
  end

  def tx
    q('BEGIN')
    out = yield self
    q('COMMIT')
    out
  rescue StandardError
    begin
      q('ROLLBACK') if @pg && !@pg.finished? && @pg.transaction_status != PG::PQTRANS_IDLE
    rescue StandardError
      discard!
    end
    raise
  end

  # One statement needs no BEGIN/COMMIT: autocommit makes it its own transaction (two round trips fewer).
  def maybe_tx(yes, &blk)
    yes ? tx(&blk) : yield(self)
  end

  def rollback!
    q('ROLLBACK')
  end
end

# A small pool: calls borrow a connection for one call only (never while job code runs).
class Pool
  def initialize(size)
    @free = Array.new(size) { |i| Conn.new("pool#{i}") }
    @mu = Mutex.new
    @cv = ConditionVariable.new
  end

  def checkout(timeout)
    deadline = mono + timeout
    @mu.synchronize do
      while @free.empty?
        remaining = deadline - mono
        raise Transient, 'pool timeout' if remaining <= 0
        @cv.wait(@mu, remaining)
      end
      @free.pop
    end
  end

  def checkin(c)
    @mu.synchronize do
      @free.push(c)
      @cv.signal
    end
  end
end

POOL = Pool.new(Cfg::POOL_SIZE)

def backoff(n)
  base = [0.1 * (2**n), Cfg::MAX_BACKOFF].min
  base * (0.5 + rand / 2)
end

# Run a call (one or more statements, usually one transaction) with the deadline, retrying transient
# failures on a fresh connection with capped, jittered backoff. `conn` = a dedicated connection.
def call(label, conn: nil, tries: nil)
  n = 0
  loop do
    c = nil
    begin
      c = conn || POOL.checkout(Cfg::CALL_TIMEOUT * 2)
      c.begin_call(Cfg::CALL_TIMEOUT)
      return yield c
    rescue StandardError => e
      c&.discard!
      raise unless transient?(e)
      n += 1
      raise if tries && n >= tries
      log "transient #{label}: #{e.class}: #{e.message.to_s.lines.first&.strip} (retry #{n})" if n <= 3 || (n % 20).zero?
      sleep backoff(n - 1)
    ensure
      if c
        c.end_call
        POOL.checkin(c) unless conn
      end
    end
  end
end

def unbytea(s)
  s.nil? ? nil : PG::Connection.unescape_bytea(s)
end

def bytea(str)
  { value: str, type: 17, format: 1 }
end

# ---------------------------------------------------------------- after-terminal duties (§7, §8.3, §8.4)

TERMINAL = %w[succeeded failed cancelled].freeze

def pg_array(text)
  return [] if text.nil?
  PG::TextDecoder::Array.new.decode(text) || []
end

# Workflow settlement (§8.3) under the workflow lock; returns [[id, parent_id]] of doomed members.
def settle(c, wf, t)
  c.q("SELECT pg_advisory_xact_lock(hashtext('belay_wf:' || $1))", [wf])
  rows = c.q('SELECT id, wf_name, state, wf_deps, wf_ignore, parent_id FROM belay_jobs WHERE workflow_id = $1', [wf]).to_a
  by_name = {}
  rows.each { |r| by_name[r['wf_name']] = r if r['wf_name'] }
  eff = {} # id => effective state (doomed counts as cancelled)
  rows.each { |r| eff[r['id']] = r['state'] }
  decided = {}
  released = []
  doomed = []
  loop do
    changed = false
    rows.each do |r|
      next unless r['state'] == 'held' && !decided[r['id']]
      deps = pg_array(r['wf_deps'])
      next if deps.empty? # an operator freeze: never touched
      ignore = pg_array(r['wf_ignore'])
      sts = deps.map { |d| (m = by_name[d]) ? eff[m['id']] : nil }
      if sts.any? { |s| %w[failed cancelled].include?(s) && !ignore.include?(s) }
        decided[r['id']] = true
        eff[r['id']] = 'cancelled'
        doomed << r
        changed = true
      elsif sts.all? { |s| s == 'succeeded' || (%w[failed cancelled].include?(s) && ignore.include?(s)) }
        decided[r['id']] = true
        released << r
        changed = true
      end
    end
    break unless changed
  end
  unless released.empty?
    c.q("UPDATE belay_jobs SET state = 'ready' WHERE id = ANY($1::bigint[]) AND state = 'held'",
        ["{#{released.map { |r| r['id'] }.join(',')}}"])
  end
  out = []
  unless doomed.empty?
    res = c.q("UPDATE belay_jobs SET state = 'cancelled', finished_at = $2 WHERE id = ANY($1::bigint[]) " \
              "AND state = 'held' RETURNING id, parent_id",
              ["{#{doomed.map { |r| r['id'] }.join(',')}}", iso(t)])
    res.each { |r| out << [r['id'].to_i, r['parent_id']&.to_i] }
  end
  out
end

# finished: [[id, workflow_id, parent_id]] of rows this transaction made terminal.
def after_terminal(c, finished, t)
  kids = Hash.new { |h, k| h[k] = [] }
  finished.each { |id, _wf, parent| kids[parent] << id if parent }
  finished.map { |_id, wf, _p| wf }.compact.uniq.sort.each do |wf|
    settle(c, wf, t).each { |id, parent| kids[parent] << id if parent }
  end
  kids.keys.map { |p| ["job:#{p}", p] }.sort_by(&:first).each do |scope, p|
    c.q("SELECT pg_advisory_xact_lock(hashtext('belay_sig:' || $1))", [scope])
    c.q('INSERT INTO belay_signals (scope, name, payload, inserted_at) VALUES ($1, $2, $3::jsonb, $4) ' \
        'ON CONFLICT (scope, name) DO UPDATE SET payload = EXCLUDED.payload, inserted_at = EXCLUDED.inserted_at',
        [scope, '$children', jdump({ 'children' => kids[p].sort }), iso(t)])
    c.q("UPDATE belay_jobs SET state = 'ready', ready_at = $2, await_scope = NULL, await_name = NULL " \
        "WHERE state = 'awaiting' AND await_scope = $1 AND await_name = $3",
        [scope, iso(t), '$children'])
  end
end

def error_entry(attempt, t, code, detail)
  d = detail&.to_s
  d = d.byteslice(0, 8192).scrub('') if d && d.bytesize > 8192
  { 'attempt' => attempt, 'at' => iso(t), 'error' => code, 'detail' => d }
end

# ---------------------------------------------------------------- executions, leases, claims

class Stop < StandardError; end # the execution ends without acking (its row is gone)
class StalePark < StandardError; end # a fenced park (an ack outcome, §7 table) found the attempt stale
class CancelNow < StandardError; end # cooperative cancel at a boundary
class FailNow < StandardError # non-retryable failure
  attr_reader :code
  def initialize(code, detail = nil)
    @code = code
    super(detail || code)
  end
end
class RetryNow < StandardError # retryable failure
  attr_reader :code
  def initialize(code, detail = nil)
    @code = code
    super(detail || code)
  end
end
class Park < StandardError; end # the execution parked (await/sleep): no further ack

Exec = Struct.new(:id, :attempt, :queue, :lost)

class Registry
  def initialize
    @mu = Mutex.new
    @cv = ConditionVariable.new
    @freed = false
    @by_id = {}
  end

  def add(e) = @mu.synchronize { @by_id[e.id] = e }

  # An execution ended: its slot is free, so poke the claimer (a local poke, operations guide "Dispatch latency").
  def remove(e)
    @mu.synchronize do
      @by_id.delete(e.id) if @by_id[e.id].equal?(e)
      @freed = true
      @cv.signal
    end
  end

  # The claimer's nap: until a slot frees or `secs` pass.
  def wait_for_slot(secs)
    @mu.synchronize do
      @cv.wait(@mu, secs) unless @freed
      @freed = false
    end
  end
  def ids = @mu.synchronize { @by_id.keys }
  def count_queue(q) = @mu.synchronize { @by_id.values.count { |e| e.queue == q } }
  def size = @mu.synchronize { @by_id.size }
  def mark_lost(ids) = @mu.synchronize { ids.each { |i| @by_id[i]&.lost = true } }
end

REG = Registry.new
$draining = false

def observe(job_id, attempt, phase, observed)
  call("observe #{phase}") do |c|
    c.q('INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) VALUES ($1, $2, $3, $4, $5::jsonb, $6)',
        [job_id, attempt, Cfg::NODE, phase, jdump(observed), iso(now)])
  end
end

# A deliberate self-kill (PROTOCOL §1): the exit observation first, retried until it commits.
def self_kill(job_id, attempt, reason)
  observe(job_id, attempt, 'exit', { 'reason' => reason })
  log "deliberate exit: #{reason} (job #{job_id} attempt #{attempt})"
  Process.exit!(75)
end

# ---------------------------------------------------------------- the job context

class Job
  attr_reader :id, :attempt, :input, :kind, :row, :exec

  def initialize(row, exec)
    @row = row
    @id = row['id'].to_i
    @attempt = row['attempt'].to_i
    @kind = row['worker']
    @input = JSON.parse(row['input'] || '{}')
    @exec = exec
  end

  def scope = "job:#{@id}"

  # The boundary read: the row as it is now. Cancel requested => CancelNow; durable spend over a budget =>
  # budget_exceeded. A stale attempt (its lease reclaimed, e.g. after SIGSTOP/SIGCONT) is NOT stopped here:
  # PROTOCOL.md §1 says the worker "simply continues" and its acks "MUST be discarded by the fence", so it
  # runs on to its fenced ack, which is then stale (recorded as an `ack` observation).
  def boundary!(check_budget: true)
    r = call('boundary') do |c|
      c.q('SELECT state, attempt, cancel_requested, spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens ' \
          'FROM belay_jobs WHERE id = $1', [@id]).first
    end
    raise Stop, 'row gone' if r.nil?
    raise CancelNow if r['cancel_requested'] == 't'
    raise FailNow.new('budget_exceeded', 'pre-flight: durable spend exceeds the budget') if check_budget && over_budget?(r)
    r
  end

  def over_budget?(r)
    (r['budget_usd_micros'] && r['spent_usd_micros'].to_i > r['budget_usd_micros'].to_i) ||
      (r['budget_tokens'] && r['spent_tokens'].to_i > r['budget_tokens'].to_i)
  end

  def journal_read(name)
    call('journal read') do |c|
      r = c.q('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [@id, name]).first
      r && unbytea(r['value'])
    end
  end

  # §8.2: read; on a miss the boundary (cancel + budget pre-flight), run, journal with spend in one transaction.
  def step(name, usd: 0, tokens: 0, on_cross: nil)
    hit = journal_read(name)
    return JSON.parse(hit) if hit
    boundary!
    value = yield
    text = jdump(value)
    journaled, spent = call("journal #{name}") do |c|
      c.tx do
        t = now
        c.q('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [@id])
        ins = c.q('INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at) VALUES ' \
                  '($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1), $2, $3, $4, $5, $6) ' \
                  'ON CONFLICT (job_id, name) DO NOTHING RETURNING seq',
                  [@id, name, bytea(text), usd, tokens, iso(t)])
        if ins.ntuples == 1
          sp = if usd != 0 || tokens != 0
                 c.q('UPDATE belay_jobs SET spent_usd_micros = spent_usd_micros + $2, spent_tokens = spent_tokens + $3 ' \
                     'WHERE id = $1 RETURNING spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens',
                     [@id, usd, tokens]).first
               else
                 c.q('SELECT spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens FROM belay_jobs WHERE id = $1',
                     [@id]).first
               end
          [text, sp]
        else
          v = c.q('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [@id, name]).first
          sp = c.q('SELECT spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens FROM belay_jobs WHERE id = $1',
                   [@id]).first
          [unbytea(v['value']), sp]
        end
      end
    end
    if over_budget?(spent)
      on_cross&.call
      raise FailNow.new('budget_exceeded', "step #{name} crossed the budget")
    end
    JSON.parse(journaled)
  end

  def token_value
    { 'token' => SecureRandom.hex(16), 'attempt' => @attempt }
  end

  # An event (the `slow` start event). Idempotent on retry: an identical payload already in the stream is not appended again.
  def emit(payload)
    text = jdump(payload)
    call('emit') do |c|
      c.tx do
        t = now
        c.q('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [@id])
        dup = c.q('SELECT 1 FROM belay_events WHERE job_id = $1 AND payload = $2::jsonb', [@id, text]).ntuples.positive?
        unless dup
          c.q('INSERT INTO belay_events (job_id, seq, payload, inserted_at) VALUES ' \
              '($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_events WHERE job_id = $1), $2::jsonb, $3)',
              [@id, text, iso(t)])
        end
      end
    end
  end

  PARK_MAX = "LEAST(max_attempts::bigint + 1, 2147483647)::int"

  # Await a signal in job:<id> (§7 park rule, no deadline). A park and a resume are cancel boundaries.
  def await_signal(name)
    boundary!(check_budget: false)
    sig = call('read signal') do |c|
      c.q('SELECT payload FROM belay_signals WHERE scope = $1 AND name = $2', [scope, name]).first
    end
    return JSON.parse(sig['payload'] || 'null') if sig
    outcome = call('park') do |c|
      c.tx do
        t = now
        c.q("SELECT pg_advisory_xact_lock(hashtext('belay_sig:' || $1))", [scope])
        row = c.q('SELECT state, attempt, cancel_requested FROM belay_jobs WHERE id = $1', [@id]).first
        if row.nil? || row['state'] != 'running' || row['attempt'].to_i != @attempt
          :stale
        elsif row['cancel_requested'] == 't'
          :cancel
        else
          present = c.q('SELECT 1 FROM belay_signals WHERE scope = $1 AND name = $2', [scope, name]).ntuples.positive?
          res = if present
                  c.q("UPDATE belay_jobs SET state = 'ready', ready_at = $3, await_scope = NULL, await_name = NULL, " \
                      "lease_until = NULL, leased_by = NULL, max_attempts = #{PARK_MAX} " \
                      "WHERE id = $1 AND state = 'running' AND attempt = $2", [@id, @attempt, iso(t)])
                else
                  c.q("UPDATE belay_jobs SET state = 'awaiting', ready_at = NULL, await_scope = $3, await_name = $4, " \
                      "lease_until = NULL, leased_by = NULL, max_attempts = #{PARK_MAX} " \
                      "WHERE id = $1 AND state = 'running' AND attempt = $2", [@id, @attempt, scope, name])
                end
          res.cmd_tuples == 1 ? :parked : :stale
        end
      end
    end
    raise CancelNow if outcome == :cancel
    raise StalePark if outcome == :stale
    raise Park
  end

  # §8.4 spawn: a memoized `$spawn:<name>` step; children keyed `$spawn:<parent>:<name>:<i>` (always);
  # the id list rebuilt from the keys. Children, keys and journal in one transaction.
  def spawn(name, specs)
    sname = "$spawn:#{name}"
    hit = journal_read(sname)
    return JSON.parse(hit).map(&:to_i) if hit
    boundary!(check_budget: false)
    keys = specs.each_index.map { |i| "$spawn:#{@id}:#{name}:#{i}" }
    text = call('spawn') do |c|
      c.tx do
        t = now
        c.q('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', [@id])
        old = c.q('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [@id, sname]).first
        next unbytea(old['value']) if old
        params = []
        values = specs.each_with_index.map do |s, i|
          b = params.size
          params.push(s[:queue], s[:worker], jdump(s[:input]), iso(t), @id, keys[i])
          "($#{b + 1}, $#{b + 2}, $#{b + 3}::jsonb, '{}'::jsonb, 'ready', 0, '[]'::jsonb, 0, 0, false, " \
            "$#{b + 4}::timestamptz, $#{b + 4}::timestamptz, $#{b + 5}::bigint, $#{b + 6}, 'always')"
        end
        unless values.empty?
          c.q('INSERT INTO belay_jobs (queue, worker, input, meta, state, attempt, errors, spent_usd_micros, spent_tokens, ' \
              'cancel_requested, ready_at, inserted_at, parent_id, unique_key, unique_mode) VALUES ' \
              "#{values.join(', ')} ON CONFLICT DO NOTHING", params)
        end
        held = {}
        c.q("SELECT id, unique_key FROM belay_jobs WHERE unique_key = ANY($1::text[]) AND unique_mode = 'always'",
            [PG::TextEncoder::Array.new.encode(keys)]).each { |r| held[r['unique_key']] = r['id'].to_i }
        ids = keys.map { |k| held.fetch(k) }
        v = jdump(ids)
        c.q('INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at) VALUES ' \
            '($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1), $2, $3, 0, 0, $4) ' \
            'ON CONFLICT (job_id, name) DO NOTHING', [@id, sname, bytea(v), iso(t)])
        v
      end
    end
    JSON.parse(text).map(&:to_i)
  end

  # Await children (§8.4): re-verify; if any live, under the scope lock clear `$children`, re-verify, park.
  def await_children
    boundary!(check_budget: false)
    live = lambda do |c|
      c.q('SELECT count(*) AS n FROM belay_jobs WHERE parent_id = $1 AND state NOT IN ($2, $3, $4)',
          [@id, *TERMINAL]).first['n'].to_i
    end
    return if call('children') { |c| live.call(c) }.zero?
    outcome = call('park children') do |c|
      c.tx do
        c.q("SELECT pg_advisory_xact_lock(hashtext('belay_sig:' || $1))", [scope])
        row = c.q('SELECT state, attempt, cancel_requested FROM belay_jobs WHERE id = $1', [@id]).first
        if row.nil? || row['state'] != 'running' || row['attempt'].to_i != @attempt
          :stale
        elsif row['cancel_requested'] == 't'
          :cancel
        elsif live.call(c).zero?
          :done
        else
          c.q('DELETE FROM belay_signals WHERE scope = $1 AND name = $2', [scope, '$children'])
          if live.call(c).zero?
            c.rollback!
            c.q('BEGIN') # tx's COMMIT then ends an empty transaction
            :done
          else
            res = c.q("UPDATE belay_jobs SET state = 'awaiting', ready_at = NULL, await_scope = $3, await_name = $4, " \
                      "lease_until = NULL, leased_by = NULL, max_attempts = #{PARK_MAX} " \
                      "WHERE id = $1 AND state = 'running' AND attempt = $2", [@id, @attempt, scope, '$children'])
            res.cmd_tuples == 1 ? :parked : :stale
          end
        end
      end
    end
    return if outcome == :done
    raise CancelNow if outcome == :cancel
    raise StalePark if outcome == :stale
    raise Park
  end

  # Durable sleep: `$sleep:<name>` journals the wake time; the park (ready at it) is one transaction with it.
  def sleep_durable(name, seconds)
    boundary!(check_budget: false)
    sname = "$sleep:#{name}"
    hit = journal_read(sname)
    if hit
      wake = Time.iso8601(JSON.parse(hit))
      return if now >= wake
    end
    outcome = call('sleep') do |c|
      c.tx do
        t = now
        row = c.q("SELECT cancel_requested FROM belay_jobs WHERE id = $1 AND state = 'running' AND attempt = $2 FOR UPDATE",
                  [@id, @attempt]).first
        if row.nil?
          :stale
        elsif row['cancel_requested'] == 't'
          :cancel
        else
          wake_text = jdump(iso(t + seconds))
          ins = c.q('INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at) VALUES ' \
                    '($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1), $2, $3, 0, 0, $4) ' \
                    'ON CONFLICT (job_id, name) DO NOTHING RETURNING seq', [@id, sname, bytea(wake_text), iso(t)])
          if ins.ntuples.zero?
            wake_text = unbytea(c.q('SELECT value FROM belay_steps WHERE job_id = $1 AND name = $2', [@id, sname]).first['value'])
          end
          wake = Time.iso8601(JSON.parse(wake_text))
          if t >= wake
            :awake
          else
            c.q("UPDATE belay_jobs SET state = 'ready', ready_at = $3, lease_until = NULL, leased_by = NULL, " \
                "max_attempts = #{PARK_MAX} WHERE id = $1 AND state = 'running' AND attempt = $2",
                [@id, @attempt, JSON.parse(wake_text)])
            :parked
          end
        end
      end
    end
    return if outcome == :awake
    raise CancelNow if outcome == :cancel
    raise StalePark if outcome == :stale
    raise Park
  end
end

# ---------------------------------------------------------------- the nine kinds (PROTOCOL §3)

def run_kind(job)
  a = job.attempt
  inp = job.input
  case job.kind
  when 'echo'
    { 'echo' => inp['v'], 'attempt' => a }
  when 'steps'
    n = inp['n'].to_i
    raise_after = inp['raise_after']
    pause = inp['pause_ms'].to_i
    tokens = (1..n).map do |i|
      v = job.step("s#{i}") { job.token_value }
      sleep(pause / 1000.0) if pause.positive?
      raise RetryNow.new('raised', "raise_after #{i}") if a == 1 && raise_after && i == raise_after.to_i
      v['token']
    end
    { 'tokens' => tokens, 'attempt' => a }
  when 'costed'
    costs = inp['costs'] || []
    crash = inp['crash_at_crossing'] && a == 1
    on_cross = crash ? -> { self_kill(job.id, a, 'crash_at_crossing') } : nil
    tokens = costs.each_with_index.map do |u, i|
      job.step("c#{i + 1}", usd: u.to_i, on_cross: on_cross) { job.token_value }['token']
    end
    { 'tokens' => tokens, 'attempt' => a }
  when 'awaiter'
    pause = inp['pause_ms'].to_i
    sleep(pause / 1000.0) if pause.positive?
    payload = job.await_signal(inp['signal'])
    { 'payload' => payload, 'attempt' => a }
  when 'parent'
    k = inp['children'].to_i
    q = inp['queue'] || 'soak'
    p = inp['child_pause_ms'].to_i
    specs = (0...k).map do |i|
      if p.positive?
        { queue: q, worker: 'steps', input: { 'n' => 1, 'raise_after' => nil, 'pause_ms' => p } }
      else
        { queue: q, worker: 'echo', input: { 'v' => "child-#{i}" } }
      end
    end
    ids = job.spawn('kids', specs)
    job.await_children
    { 'children' => ids, 'attempt' => a }
  when 'member'
    raise FailNow.new('member_failed', "member #{inp['member']} fails on purpose") if inp['fail']
    { 'member' => inp['member'], 'attempt' => a }
  when 'flaky'
    k = inp['until_attempt'].to_i
    pre = job.step('pre') { job.token_value }['token']
    mid = job.step('mid') do
      if a <= k
        self_kill(job.id, a, 'flaky exit') if inp['mode'] == 'exit'
        raise RetryNow.new('flaky', "flaky raise on attempt #{a}")
      end
      job.token_value
    end['token']
    { 'tokens' => [pre, mid], 'attempt' => a }
  when 'slow'
    d = inp['seconds'].to_f
    job.emit({ 'phase' => 'start', 'attempt' => a, 'node' => Cfg::NODE })
    begin_tok = job.step('begin') { job.token_value }['token']
    job.step('nap', usd: 1) do
      sleep d
      job.token_value
    end
    r = call('pre_ack read') { |c| c.q('SELECT state, attempt, leased_by FROM belay_jobs WHERE id = $1', [job.id]).first }
    observe(job.id, a, 'pre_ack', { 'state' => r['state'], 'attempt' => r['attempt'].to_i, 'leased_by' => r['leased_by'] })
    { 'token' => begin_tok, 'node' => Cfg::NODE, 'attempt' => a }
  when 'sleeper'
    pre = job.step('pre') { job.token_value }['token']
    job.sleep_durable('nap', inp['seconds'].to_f)
    post = job.step('post') { job.token_value }['token']
    { 'tokens' => [pre, post], 'attempt' => a }
  else
    raise FailNow.new('unknown_kind', "no kind #{job.kind}")
  end
end

# ---------------------------------------------------------------- acks (§7), fenced

FENCE = "WHERE id = $1 AND state = 'running' AND attempt = $2"

def retry_delay(attempt)
  [0.25 * (2**[attempt - 1, 10].min), 4.0].min
end

# outcome: [:succeed, value] | [:retry, code, detail] | [:fail, code, detail] | [:cancel]
# Returns the state the ack produced, or 'stale'.
# A retried ack whose fence matched nothing: did an earlier try of this same ack commit (its reply lost)?
# Only the row's own marks of those tries count — the result of this attempt, a finished_at or an error
# entry's `at` equal to one of the tries' `now` — never the state alone (a reclaim may have failed the row
# at this attempt: that ack is stale).
def own_committed_try(c, job, kind, tried)
  arr = PG::TextEncoder::Array.new.encode(tried)
  r = c.q('SELECT state, attempt, finished_at = ANY($2::timestamptz[]) AS mine, ' \
          "EXISTS (SELECT 1 FROM jsonb_array_elements(errors) e WHERE e->>'attempt' = $3 AND e->>'at' = ANY($4::text[])) AS entry " \
          'FROM belay_jobs WHERE id = $1', [job.id, arr, job.attempt.to_s, arr]).first
  return 'stale' if r.nil?
  mine = r['mine'] == 't'
  entry = r['entry'] == 't'
  case kind
  when :succeed then r['state'] == 'succeeded' && r['attempt'].to_i == job.attempt ? 'succeeded' : 'stale'
  when :fail then entry ? 'failed' : 'stale'
  when :cancel then r['state'] == 'cancelled' && mine ? 'cancelled' : 'stale'
  when :retry then entry ? (mine && r['state'] == 'failed' ? 'failed' : 'ready') : 'stale'
  else 'stale'
  end
end

def ack(job, outcome)
  tried = [] # the `now` of every try: a retried ack recognises its own committed try by it
  # A job with neither workflow nor parent has no after-terminal duty: its ack is the fenced UPDATE alone.
  alone = job.row['workflow_id'].nil? && job.row['parent_id'].nil?
  call("ack #{outcome[0]}") do |c|
    c.maybe_tx(!alone) do
      t = now
      tried << iso(t)
      res = case outcome[0]
            when :succeed
              c.q("UPDATE belay_jobs SET state = 'succeeded', result = $3, finished_at = $4, lease_until = NULL, " \
                  "leased_by = NULL #{FENCE} RETURNING state, workflow_id, parent_id",
                  [job.id, job.attempt, bytea(jdump(outcome[1])), iso(t)])
            when :retry
              e = jdump([error_entry(job.attempt, t, outcome[1], outcome[2])])
              c.q("UPDATE belay_jobs SET state = CASE WHEN attempt < max_attempts THEN 'ready' ELSE 'failed' END, " \
                  'ready_at = CASE WHEN attempt < max_attempts THEN $4::timestamptz ELSE ready_at END, ' \
                  'finished_at = CASE WHEN attempt < max_attempts THEN NULL ELSE $5::timestamptz END, ' \
                  "errors = errors || $3::jsonb, lease_until = NULL, leased_by = NULL #{FENCE} " \
                  'RETURNING state, workflow_id, parent_id',
                  [job.id, job.attempt, e, iso(t + retry_delay(job.attempt)), iso(t)])
            when :fail
              e = jdump([error_entry(job.attempt, t, outcome[1], outcome[2])])
              c.q("UPDATE belay_jobs SET state = 'failed', finished_at = $4, errors = errors || $3::jsonb, " \
                  "lease_until = NULL, leased_by = NULL #{FENCE} RETURNING state, workflow_id, parent_id",
                  [job.id, job.attempt, e, iso(t)])
            when :cancel
              c.q("UPDATE belay_jobs SET state = 'cancelled', finished_at = $3, lease_until = NULL, leased_by = NULL " \
                  "#{FENCE} RETURNING state, workflow_id, parent_id", [job.id, job.attempt, iso(t)])
            end
      row = res.first
      if row.nil?
        tried.size > 1 ? own_committed_try(c, job, outcome[0], tried) : 'stale'
      else
        if TERMINAL.include?(row['state'])
          after_terminal(c, [[job.id, row['workflow_id'], row['parent_id']&.to_i]], t)
        end
        row['state']
      end
    end
  end
end

def execute(row)
  e = Exec.new(row['id'].to_i, row['attempt'].to_i, row['queue'], false)
  job = Job.new(row, e)
  outcome = begin
    v = run_kind(job)
    if job.row['budget_usd_micros'] || job.row['budget_tokens']
      # a re-run that only replayed the journal past a crossing cannot succeed (decisions.md)
      r = call('budget check') do |c|
        c.q('SELECT spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens FROM belay_jobs WHERE id = $1', [job.id]).first
      end
      v = nil if job.over_budget?(r)
    end
    v.nil? ? [:fail, 'budget_exceeded', 'durable spend exceeds the budget'] : [:succeed, v]
  rescue CancelNow
    [:cancel]
  rescue FailNow => x
    [:fail, x.code, x.message]
  rescue RetryNow => x
    [:retry, x.code, x.message]
  rescue Park
    nil
  rescue StalePark
    log "stale park discarded: job #{e.id} attempt #{e.attempt}"
    observe(job.id, job.attempt, 'ack', { 'state' => 'stale' })
    nil
  rescue Stop => x
    log "job #{e.id} attempt #{e.attempt} stops without ack: #{x.message}"
    nil
  rescue StandardError => x
    log "job #{e.id} raised #{x.class}: #{x.message}\n#{x.backtrace&.first(5)&.join("\n")}"
    [:retry, 'exception', "#{x.class}: #{x.message}"]
  end
  return unless outcome
  produced = ack(job, outcome)
  log "stale ack discarded: job #{e.id} attempt #{e.attempt}" if produced == 'stale'
  observe(job.id, job.attempt, 'ack', { 'state' => produced }) if job.kind == 'slow' || produced == 'stale'
end

# ---------------------------------------------------------------- queues, admission and claims (§6)

QueueOpts = Struct.new(:limit, :global_limit, :rate, :partition)

class Claimer
  def initialize
    @conn = Conn.new('claim')
    @opts = {}
    @refreshed = nil
  end

  def refresh_opts(force: false)
    return if !force && @refreshed && mono - @refreshed < Cfg::QUEUE_REFRESH
    rows = call('queues', conn: @conn) { |c| c.q('SELECT name, opts FROM belay_queues WHERE name = ANY($1::text[])', [PG::TextEncoder::Array.new.encode(Cfg::QUEUES)]).to_a }
    found = {}
    rows.each { |r| found[r['name']] = JSON.parse(r['opts'] || '{}') }
    Cfg::QUEUES.each do |q|
      o = found[q] || {}
      lim = o['limit']
      lim = lim['max'] if lim.is_a?(Hash) # adaptive limits: this worker runs at the max
      @opts[q] = QueueOpts.new((lim || Cfg::DEFAULT_LIMIT).to_i, o['global_limit'], o['rate'], o['partition'])
    end
    @refreshed = mono
  end

  CLAIMABLE = "((state = 'ready' AND (ready_at IS NULL OR ready_at <= $2)) OR (state = 'awaiting' AND ready_at <= $2))"

  def round_half_up(x)
    (x + 0.5).floor
  end

  # One claim transaction for queue q, taking at most `free` rows. Returns the claimed rows.
  def claim(q, free)
    o = @opts[q]
    admission = o.global_limit || o.rate || o.partition
    call("claim #{q}", conn: @conn, tries: 1) do |c|
      c.tx do
        t = now
        take = free
        if admission
          c.q("SELECT pg_advisory_xact_lock(hashtext('belay:' || $1))", [q])
          if o.global_limit || o.partition
            running = c.q("SELECT id, lease_until > $2 AS live FROM belay_jobs WHERE queue = $1 AND state = 'running' FOR UPDATE",
                          [q, iso(t)])
            if o.global_limit
              live = running.count { |r| r['live'] == 't' }
              take = [take, o.global_limit.to_i - live].min
            end
          end
          bucket = nil
          if o.rate && take.positive?
            period = o.rate['period'].to_i
            allowed = o.rate['allowed'].to_i
            est = [(o.rate['estimate'] || 1).to_i, 1].max
            bucket = o.rate['resource'] ? "resource:#{o.rate['resource']}" : "queue:#{q}"
            epoch = t.to_r
            w = (epoch / period).floor * period
            cnt = lambda do |ws|
              r = c.q('SELECT count FROM belay_rate WHERE bucket = $1 AND window_start = $2', [bucket, iso(Time.at(ws).utc)]).first
              r ? r['count'].to_i : 0
            end
            used = cnt.call(w) + round_half_up(cnt.call(w - period) * (1 - (epoch - w) / period))
            admit = ([[allowed - used, allowed].min, 0].max / est).floor
            take = [take, admit].min
          end
        end
        next [] if take <= 0
        ids = if o.partition
                field = o.partition['field'] == 'meta' ? 'meta' : 'input'
                per_key = (o.global_limit || o.limit).to_i
                c.q("WITH live AS (SELECT COALESCE(#{field}->>$3, '') AS k, count(*) AS n FROM belay_jobs " \
                    "WHERE queue = $1 AND state = 'running' AND lease_until > $2 GROUP BY 1), " \
                    "cand AS (SELECT id, priority, ready_at, COALESCE(#{field}->>$3, '') AS k, " \
                    "row_number() OVER (PARTITION BY COALESCE(#{field}->>$3, '') ORDER BY priority, ready_at NULLS FIRST, id) AS rn " \
                    "FROM belay_jobs WHERE queue = $1 AND #{CLAIMABLE}) " \
                    'SELECT cand.id FROM cand LEFT JOIN live ON live.k = cand.k ' \
                    'WHERE cand.rn <= GREATEST($4::int - COALESCE(live.n, 0), 0) ' \
                    'ORDER BY cand.priority, cand.ready_at NULLS FIRST, cand.id LIMIT $5',
                    [q, iso(t), o.partition['key'], per_key, take]).map { |r| r['id'].to_i }
              else
                ready = c.q("SELECT id, priority, ready_at FROM belay_jobs WHERE queue = $1 AND state = 'ready' " \
                            'AND (ready_at IS NULL OR ready_at <= $2) ORDER BY priority, ready_at NULLS FIRST, id ' \
                            'LIMIT $3 FOR UPDATE SKIP LOCKED', [q, iso(t), take]).to_a
                due = c.q("SELECT id, priority, ready_at FROM belay_jobs WHERE queue = $1 AND state = 'awaiting' " \
                          'AND ready_at <= $2 ORDER BY priority, ready_at, id LIMIT $3 FOR UPDATE SKIP LOCKED',
                          [q, iso(t), take]).to_a
                (ready + due).sort_by do |r|
                  [r['priority'].to_i, r['ready_at'] ? 1 : 0, r['ready_at'] ? Time.parse(r['ready_at']).to_r : 0, r['id'].to_i]
                end.first(take).map { |r| r['id'].to_i }
              end
        next [] if ids.empty?
        rows = c.q("UPDATE belay_jobs SET state = 'running', attempt = attempt + 1, lease_until = $3, leased_by = $4, " \
                   "started_at = COALESCE(started_at, $2) WHERE id = ANY($1::bigint[]) AND #{CLAIMABLE} " \
                   'RETURNING id, queue, worker, input, attempt, max_attempts, budget_usd_micros, budget_tokens, ' \
                   'workflow_id, parent_id',
                   ["{#{ids.join(',')}}", iso(t), iso(t + Cfg::TTL), Cfg::NODE]).to_a
        if bucket && !rows.empty?
          est = [(o.rate['estimate'] || 1).to_i, 1].max
          w = (t.to_r / o.rate['period'].to_i).floor * o.rate['period'].to_i
          c.q('INSERT INTO belay_rate (bucket, window_start, count) VALUES ($1, $2, $3) ' \
              'ON CONFLICT (bucket, window_start) DO UPDATE SET count = belay_rate.count + EXCLUDED.count',
              [bucket, iso(Time.at(w).utc), rows.size * est])
        end
        rows
      end
    end
  rescue StandardError => e
    log "claim #{q} failed: #{e.class}: #{e.message.to_s.lines.first&.strip}"
    sleep backoff(1)
    []
  end

  def spawn_execution(row, q)
    ex = Exec.new(row['id'].to_i, row['attempt'].to_i, q, false)
    REG.add(ex)
    Thread.new do
      execute(row)
    rescue StandardError => x
      log "execution #{ex.id} crashed: #{x.class}: #{x.message}"
    ensure
      REG.remove(ex)
    end
  end

  def start(threads)
    refresh_opts(force: true) # from the first claim on (duty P18)
    idle = 0.025
    loop do
      break if $draining
      begin
        refresh_opts
      rescue StandardError => e
        log "queue refresh failed: #{e.message}"
      end
      got = 0
      tried = 0
      Cfg::QUEUES.each do |q|
        break if $draining
        free = @opts[q].limit - REG.count_queue(q)
        next if free <= 0
        tried += 1
        claim(q, free).each do |row|
          got += 1
          threads << spawn_execution(row, q)
        end
      end
      threads.reject! { |t| !t.alive? }
      # Adaptive polling (§9.1): hot while claims return work, decaying to 500 ms while the queues are empty;
      # a full node is not idle — it naps until an execution frees a slot (or the idle ceiling passes).
      idle = got.positive? ? 0.025 : [idle * 2, 0.5].min
      if got.positive?
        next
      elsif tried.zero?
        REG.wait_for_slot(0.5)
      else
        REG.wait_for_slot(idle)
      end
    end
  end
end

# ---------------------------------------------------------------- lease renewal (§6): every ttl/3, one statement

def renewer
  conn = Conn.new('renew')
  next_at = mono
  loop do
    wait = next_at - mono
    sleep wait if wait.positive?
    started = mono
    ids = REG.ids
    if ids.empty?
      next_at = started + 0.2
      next
    end
    begin
      kept = call('renew', conn: conn, tries: 1) do |c|
        t = now
        c.q("UPDATE belay_jobs SET lease_until = $2 WHERE id = ANY($1::bigint[]) AND state = 'running' AND leased_by = $3 RETURNING id",
            ["{#{ids.join(',')}}", iso(t + Cfg::TTL), Cfg::NODE]).map { |r| r['id'].to_i }
      end
      lost = ids - kept
      REG.mark_lost(lost) unless lost.empty?
      next_at = started + Cfg::RENEW_EVERY
    rescue StandardError => e
      log "renewal failed: #{e.class}: #{e.message.to_s.lines.first&.strip}"
      next_at = mono + 0.3
    end
  end
end

# ---------------------------------------------------------------- the sweeper: reclaims, $children reconciler, crons

module Cron
  MONTHS = %w[jan feb mar apr may jun jul aug sep oct nov dec].freeze
  DAYS = %w[sun mon tue wed thu fri sat].freeze

  def self.field(text, lo, hi, names = nil)
    out = []
    text.downcase.split(',').each do |part|
      rng, step = part.split('/')
      step = (step || '1').to_i
      conv = lambda do |s|
        if names && (i = names.index(s))
          i + (names.equal?(MONTHS) ? 1 : 0)
        else
          Integer(s, 10)
        end
      end
      a, b = if rng == '*'
               [lo, hi]
             elsif rng.include?('-')
               rng.split('-', 2).map { |s| conv.call(s) }
             else
               v = conv.call(rng)
               [v, part.include?('/') ? hi : v]
             end
      (a..b).step(step) { |v| out << v }
    end
    out.map { |v| names.equal?(DAYS) && v == 7 ? 0 : v }
  end

  def self.parse(expr)
    f = expr.split
    raise ArgumentError, "cron needs 5 fields: #{expr}" unless f.size == 5
    { min: field(f[0], 0, 59), hour: field(f[1], 0, 23), dom: field(f[2], 1, 31), mon: field(f[3], 1, 12, MONTHS),
      dow: field(f[4], 0, 7, DAYS), dom_star: f[2] == '*', dow_star: f[4] == '*' }
  end

  def self.match?(c, t)
    return false unless c[:min].include?(t.min) && c[:hour].include?(t.hour) && c[:mon].include?(t.month)
    d = c[:dom].include?(t.day)
    w = c[:dow].include?(t.wday)
    if c[:dom_star] || c[:dow_star]
      (c[:dom_star] || d) && (c[:dow_star] || w)
    else
      d || w
    end
  end
end

class Sweeper
  def initialize
    @conn = Conn.new('sweep')
    @cron_since = nil
  end

  def reclaim_backoff(attempt)
    [1.0 * (2**[attempt - 1, 10].min), 8.0].min
  end

  def reclaim
    ids = call('expired', conn: @conn, tries: 1) do |c|
      c.q("SELECT id FROM belay_jobs WHERE state = 'running' AND lease_until <= $1 ORDER BY lease_until LIMIT 200",
          [iso(now)]).map { |r| r['id'].to_i }
    end
    ids.each do |id|
      call('reclaim', conn: @conn, tries: 1) do |c|
        c.tx do
          t = now
          r = c.q("SELECT id, attempt, max_attempts, workflow_id, parent_id FROM belay_jobs WHERE id = $1 AND state = 'running' " \
                  'AND lease_until <= $2 FOR UPDATE SKIP LOCKED', [id, iso(t)]).first
          next unless r
          a = r['attempt'].to_i
          e = jdump([error_entry(a, t, 'lease_expired', nil)])
          if a < r['max_attempts'].to_i
            c.q("UPDATE belay_jobs SET state = 'ready', ready_at = $3, errors = errors || $2::jsonb, lease_until = NULL, " \
                'leased_by = NULL WHERE id = $1', [id, e, iso(t + reclaim_backoff(a))])
          else
            c.q("UPDATE belay_jobs SET state = 'failed', finished_at = $3, errors = errors || $2::jsonb, lease_until = NULL, " \
                'leased_by = NULL WHERE id = $1', [id, e, iso(t)])
            after_terminal(c, [[id, r['workflow_id'], r['parent_id']&.to_i]], t)
          end
        end
      end
    end
  end

  def reconcile
    call('reconcile', conn: @conn, tries: 1) do |c|
      c.q("UPDATE belay_jobs p SET state = 'ready', ready_at = $1, await_scope = NULL, await_name = NULL " \
          "WHERE p.state = 'awaiting' AND p.await_name = $2 AND p.await_scope = 'job:' || p.id " \
          'AND EXISTS (SELECT 1 FROM belay_jobs ch WHERE ch.parent_id = p.id) ' \
          "AND NOT EXISTS (SELECT 1 FROM belay_jobs ch WHERE ch.parent_id = p.id AND ch.state NOT IN ('succeeded', 'failed', 'cancelled'))",
          [iso(now), '$children'])
    end
  end

  def crons
    t0 = now
    @cron_since ||= t0 - 60
    since = @cron_since
    call('crons', conn: @conn, tries: 1) do |c|
      rows = c.q('SELECT name, expression, worker, input, opts FROM belay_crons WHERE NOT paused').to_a
      rows.each do |r|
        spec = begin
          Cron.parse(r['expression'])
        rescue StandardError => e
          log "cron #{r['name']} refused: #{e.message}"
          next
        end
        opts = JSON.parse(r['opts'] || '{}')
        slot = Time.at((since.to_i / 60 + 1) * 60).utc
        while slot <= t0
          if Cron.match?(spec, slot)
            t = now
            c.q('INSERT INTO belay_jobs (queue, worker, input, meta, state, priority, attempt, max_attempts, errors, ' \
                'spent_usd_micros, spent_tokens, cancel_requested, ready_at, inserted_at, cron_name, cron_slot) VALUES ' \
                "($1, $2, $3::jsonb, '{}'::jsonb, 'ready', $4, 0, $5, '[]'::jsonb, 0, 0, false, $6, $6, $7, $8) " \
                'ON CONFLICT DO NOTHING',
                [opts['queue'] || 'default', r['worker'], r['input'] || '{}', (opts['priority'] || 0).to_i,
                 (opts['max_attempts'] || 20).to_i, iso(t), r['name'], iso(slot)])
          end
          slot += 60
        end
      end
    end
    @cron_since = t0
  end

  def start
    loop do
      started = mono
      %i[reclaim reconcile crons].each do |m|
        send(m)
      rescue StandardError => e
        log "sweeper #{m} failed: #{e.class}: #{e.message.to_s.lines.first&.strip}"
      end
      rest = Cfg::SWEEP_EVERY - (mono - started)
      sleep rest if rest.positive?
    end
  end
end

# ---------------------------------------------------------------- main

def check_schema
  r = call('meta', tries: 1000) { |c| c.q('SELECT version, contract_major FROM belay_meta').first }
  raise "contract major #{r['contract_major']} is newer than 1" if r['contract_major'].to_i > 1
  raise "migration #{r['version']} is older than 3" if r['version'].to_i < 3
end

def main
  Thread.abort_on_exception = false
  term_at = nil
  Signal.trap('TERM') { $draining = true }
  check_schema
  threads = []
  Thread.new { renewer }
  Thread.new { Sweeper.new.start }
  claimer = Thread.new { Claimer.new.start(threads) }
  log "started: queues #{Cfg::QUEUES.join(',')} ttl #{Cfg::TTL} offset #{Cfg::OFFSET}"
  loop do
    sleep 0.05
    next unless $draining
    term_at ||= mono
    claimer.join(0.05) # stop claiming first
    if REG.size.zero? || mono - term_at >= Cfg::GRACE
      log "drained (#{REG.size} still running) after #{(mono - term_at).round(2)} s: exit 0"
      Process.exit!(0)
    end
  end
end

main if $PROGRAM_NAME == __FILE__
