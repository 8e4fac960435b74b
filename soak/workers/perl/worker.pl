#!/usr/bin/env perl
# A Belay soak worker in Perl 5 (DBI + DBD::Pg, JSON::PP, ithreads), written from the documents
# only: docs/spec/belay-wire-contract.txt, docs/decisions.md, docs/sdk-guide.md, docs/schema.md,
# docs/connections.md, docs/certification.md and soak/PROTOCOL.md.
#
# One process, ithreads: the main thread claims, N executor threads run jobs (each with its own
# connection), one renewer thread renews every local lease each ttl/3, one sweeper thread reclaims
# expired leases, runs the $children reconciler and fires crons (every second).
use threads;
use threads::shared;
use strict;
use warnings;
use Thread::Queue;
use DBI;
use DBD::Pg qw(:async);
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time sleep);
use Time::Local qw(timegm);

$| = 1;
$SIG{PIPE} = 'IGNORE';

# ---------------------------------------------------------------- configuration (PROTOCOL.md §1)
my $URL    = $ENV{BELAY_DATABASE_URL} or die "BELAY_DATABASE_URL is not set\n";
my $NODE   = $ENV{BELAY_NODE} // "perl-$$";
my @QUEUES = grep { length } split /,/, ($ENV{BELAY_QUEUES} // 'soak');
my $TTL    = $ENV{BELAY_LEASE_TTL} // 10;
my $OFFSET = $ENV{BELAY_CLOCK_OFFSET} // 0;
my $SLOTS  = $ENV{BELAY_PERL_SLOTS} // 16;
my $GRACE  = 11.0;    # SIGTERM drain: 10-15 s after the signal; main may notice it one call (<= 2.5 s) late
my $CALL_TIMEOUT = $TTL / 4 > 2.5 ? $TTL / 4 : 2.5;    # client-side deadline per call
my $TERMINAL = "('succeeded','failed','cancelled')";
my $CLAIMABLE = "((state = 'ready' AND (ready_at IS NULL OR ready_at <= \$NOW::timestamptz))"
              . " OR (state = 'awaiting' AND ready_at <= \$NOW::timestamptz))";

my $JSON = JSON::PP->new->utf8(0)->allow_nonref;

# ---------------------------------------------------------------- shared state
my $TERM :shared = 0;
my %RUNNING :shared;          # job id => attempt this node executes
my %QRUN :shared;             # queue => local executions
my $NRUN :shared = 0;
my %LOST :shared;             # "id:attempt" => 1 when a renewal did not return it
my $JOBQ = Thread::Queue->new;

$SIG{TERM} = sub { $TERM = 1 };   # set before the threads clone %SIG
$SIG{INT}  = sub { $TERM = 1 };

# ---------------------------------------------------------------- logging and clock
sub logmsg {
    my @t = gmtime(time);
    printf STDERR "%02d:%02d:%02d %s [%s] %s\n", $t[2], $t[1], $t[0], $NODE,
        (threads->tid ? 't' . threads->tid : 'main'), join(' ', @_);
}

sub now_us { int((time() + $OFFSET) * 1_000_000) }

sub iso_us {
    my ($us) = @_;
    my $s = int($us / 1_000_000);
    my $f = $us - $s * 1_000_000;
    return POSIX::strftime('%Y-%m-%dT%H:%M:%S', gmtime($s)) . sprintf('.%06d+00:00', $f);
}

sub now_iso { iso_us(now_us()) }

sub parse_iso_us {    # the ISO-8601 strings this worker writes (and PostgreSQL's text output)
    my ($s) = @_;
    $s =~ /^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d(?::?\d\d)?)?$/
        or die "bad timestamp $s";
    my $t = timegm($6, $5, $4, $3, $2 - 1, $1);
    my $frac = defined $7 ? substr($7 . '000000', 0, 6) : 0;
    my $tz = $8 // 'Z';
    if ($tz ne 'Z') {
        my ($sign, $h, $m) = $tz =~ /^([+-])(\d\d):?(\d\d)?$/;
        my $off = $h * 3600 + ($m // 0) * 60;
        $t -= $sign eq '+' ? $off : -$off;
    }
    return $t * 1_000_000 + $frac;
}

my $URANDOM;
sub token {
    open($URANDOM, '<:raw', '/dev/urandom') or die "urandom: $!" unless $URANDOM;
    read($URANDOM, my $b, 16) == 16 or die 'short read of /dev/urandom';
    return unpack('H*', $b);
}

# ---------------------------------------------------------------- control-flow exceptions
sub Retry { die bless { error => $_[0], detail => $_[1] }, 'Belay::Retry' }   # retryable error
sub Fail  { die bless { error => $_[0], detail => $_[1] }, 'Belay::Fail' }    # non-retryable
sub Done  { die bless { why => $_[0] }, 'Belay::Done' }                       # execution over, acked/parked

# ---------------------------------------------------------------- database access
our $DBH;

sub parse_url {
    my ($u) = @_;
    $u =~ m{^postgres(?:ql)?://(?:([^:@/]*)(?::([^@/]*))?@)?([^/?]*)(?:/([^?]*))?(?:\?(.*))?$}
        or die "cannot parse BELAY_DATABASE_URL\n";
    my ($user, $pass, $hostport, $db, $query) = ($1, $2, $3, $4, $5);
    my $dec = sub { my $x = shift; return undef unless defined $x; $x =~ s/%([0-9A-Fa-f]{2})/chr hex $1/ge; $x };
    my %p;
    if (defined $hostport && length $hostport) {
        if ($hostport =~ /^\[(.*)\](?::(\d+))?$/ or $hostport =~ /^([^:]*)(?::(\d+))?$/) {
            $p{host} = $dec->($1) if length $1;
            $p{port} = $2 if defined $2;
        }
    }
    $p{dbname} = $dec->($db) if defined $db && length $db;
    for my $kv (split /&/, $query // '') {
        my ($k, $v) = split /=/, $kv, 2;
        $p{$dec->($k)} = $dec->($v // '');
    }
    $user = $dec->(delete $p{user}) if exists $p{user};
    $pass = $dec->(delete $p{password}) if exists $p{password};
    return (\%p, $dec->($user), $dec->($pass));
}

my ($CONNP, $CONNUSER, $CONNPASS) = parse_url($URL);

sub drop_conn {
    return unless $DBH;
    my $d = $DBH;
    undef $DBH;
    eval { $d->{RaiseError} = 0; $d->disconnect };
}

our @GRAVE;    # handles abandoned by a call deadline (see dbq)

sub db_connect {
    my %p = (connect_timeout => 2, keepalives => 1, keepalives_idle => 10, keepalives_interval => 3,
             keepalives_count => 3, tcp_user_timeout => 20000, %$CONNP, application_name => $NODE);
    my $dsn = 'dbi:Pg:' . join(';', map { "$_=$p{$_}" } grep { defined $p{$_} } sort keys %p);
    my $d = eval {
        DBI->connect($dsn, $CONNUSER, $CONNPASS,
            { AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0,
              pg_server_prepare => 0, pg_enable_utf8 => 1 });
    };
    die bless { msg => 'connect: ' . ($@ || $DBI::errstr // 'failed') }, 'Belay::Transient' unless $d;
    $DBH = $d;
    my $st = int($CALL_TIMEOUT * 2000);
    dbq("SET statement_timeout = $st");
    dbq("SET idle_in_transaction_session_timeout = $st");
    dbq("SET TIME ZONE 'UTC'");
}

my @TRANSIENT_STATES = qw(40001 40P01 57P01 57P02 57P03 53300 55P03 57014 25P03);
my $TRANSIENT_RE = qr/server closed|terminat|could not connect|connection refused|no connection|not connected|
    lost synchronization|connection reset|broken pipe|could not receive|could not send|SSL SYSCALL|
    timeout expired|the database system is|connection to server|Connection timed out|EOF detected|
    Bad file descriptor|Network is unreachable|No route to host/xi;

# dbq(SQL, binds...) runs one statement asynchronously, bounded by the call deadline. `$NOW` in the
# SQL text is replaced by `$1`-style parameter of the first bind when the caller uses qn().
sub dbq {
    my ($sql, @binds) = @_;
    db_connect() unless $DBH;
    my $deadline = time() + $CALL_TIMEOUT;
    my ($rows, $rv, $sth);
    my $ok = eval {
        $sth = $DBH->prepare($sql, { pg_async => PG_ASYNC });
        $sth->execute(@binds);
        my $fd = $DBH->{pg_socket};
        while (1) {
            my $r = $DBH->pg_ready;
            last if $r;
            my $left = $deadline - time();
            if ($left <= 0) { die bless { msg => "call deadline: $sql" }, 'Belay::Deadline' }
            my $rin = '';
            vec($rin, $fd, 1) = 1;
            select(my $rout = $rin, undef, undef, $left > 0.25 ? 0.25 : $left);
        }
        $rv = $sth->pg_result;
        $rows = $sth->{NUM_OF_FIELDS} ? $sth->fetchall_arrayref({}) : [];
        1;
    };
    return wantarray ? ($rows, $rv) : $rows if $ok;
    my $e = $@;
    if (ref $e eq 'Belay::Deadline') {
        # Never let DBD::Pg destroy a handle with its query in flight: it would PQcancel, which
        # opens a new connection over the same (stalled) path and blocks until the stall ends.
        # Shut the socket down under libpq and keep both handles forever (one leak per cut).
        push @GRAVE, [ $sth, $DBH ];
        $DBH->{InactiveDestroy} = 1;
        my $fd = eval { $DBH->{pg_socket} };
        syscall(48, $fd, 2) if defined $fd && $fd >= 0;    # shutdown(fd, SHUT_RDWR), x86_64
        undef $DBH;
        die bless { msg => $e->{msg} }, 'Belay::Transient';
    }
    my $state = $DBH ? ($DBH->state // '') : '';
    my $msg = "$e";
    # Not transient: a server-reported SQLSTATE outside the transient classes (sdk-guide §7).
    my $server_error = $state =~ /^[0-9A-Z]{5}$/ && $state !~ /^(08|S8|57P0)/
        && !grep({ $_ eq $state } @TRANSIENT_STATES) && $msg !~ $TRANSIENT_RE;
    if (!$server_error) {
        drop_conn();
        die bless { msg => "[$state] $msg" }, 'Belay::Transient';
    }
    die bless { msg => "[$state] $msg", state => $state }, 'Belay::DBError';
}

sub dbq1 { my $r = dbq(@_); return $r->[0] }

# txn(code): BEGIN, code, COMMIT; ROLLBACK on any error (or drop the connection when it is gone).
sub txn {
    my ($code) = @_;
    dbq('BEGIN');
    my @r = eval { $code->() };
    if (my $e = $@) {
        if ($DBH && ref $e ne 'Belay::Transient') { eval { dbq('ROLLBACK') } or drop_conn() }
        else { drop_conn() }
        die $e;
    }
    dbq('COMMIT');
    return wantarray ? @r : $r[0];
}

sub is_transient { my $e = shift; return ref $e eq 'Belay::Transient' }

# retry(what, code): transient faults are the database's weather: retry with capped backoff.
sub retry {
    my ($what, $code, %o) = @_;
    my $delay = 0.05;
    my $tries = 0;
    while (1) {
        $tries++;
        my @r = eval { $code->($tries) };
        return wantarray ? @r : $r[0] unless $@;
        my $e = $@;
        die $e unless is_transient($e);
        logmsg("transient ($what, try $tries): $e->{msg}") if $tries == 1 || $tries % 10 == 0;
        die $e if $o{max_tries} && $tries >= $o{max_tries};
        sleep($delay + rand($delay / 2));
        $delay *= 2;
        $delay = 1.0 if $delay > 1.0;
    }
}

sub pg_int_array { '{' . join(',', map { int } @_) . '}' }
sub pg_text_array { '{' . join(',', map { my $x = $_; $x =~ s/(["\\])/\\$1/g; "\"$x\"" } @_) . '}' }

sub jenc { $JSON->encode($_[0]) }

# ---------------------------------------------------------------- after-terminal steps (§7, §8.3, §8.4)
# Inside the terminal write's transaction: settle each workflow under its lock, then deliver
# $children to the parents of the finished jobs and of the settlement-cancelled ones.
sub after_terminal {
    my ($now, @finished) = @_;    # each {id, workflow_id, parent_id}
    my %kids;
    my %wfs = map { ($_->{workflow_id} => 1) } grep { defined $_->{workflow_id} } @finished;
    for my $wf (sort keys %wfs) {
        dbq('SELECT pg_advisory_xact_lock(hashtext($1))', "belay_wf:$wf");
        for my $d (settle($wf, $now)) {
            push @{ $kids{ $d->{parent_id} } }, $d->{id} if defined $d->{parent_id};
        }
    }
    for my $f (@finished) {
        push @{ $kids{ $f->{parent_id} } }, $f->{id} if defined $f->{parent_id};
    }
    for my $pid (sort { "job:$a" cmp "job:$b" } keys %kids) {
        my @ids = sort { $a <=> $b } map { 0 + $_ } @{ $kids{$pid} };
        deliver("job:$pid", '$children', jenc({ children => \@ids }), $now);
    }
}

sub deliver {    # §8.1: under the scope lock, upsert the signal row and wake its awaiters
    my ($scope, $name, $payload, $now) = @_;
    dbq('SELECT pg_advisory_xact_lock(hashtext($1))', "belay_sig:$scope");
    dbq('INSERT INTO belay_signals (scope, name, payload, inserted_at) VALUES ($1, $2, $3::jsonb, $4::timestamptz)
       ON CONFLICT (scope, name) DO UPDATE SET payload = EXCLUDED.payload, inserted_at = EXCLUDED.inserted_at',
      $scope, $name, $payload, $now);
    dbq(q{UPDATE belay_jobs SET state = 'ready', ready_at = $3::timestamptz, await_scope = NULL, await_name = NULL
        WHERE state = 'awaiting' AND await_scope = $1 AND await_name = $2}, $scope, $name, $now);
}

sub settle {    # §8.3, to a fixpoint; returns the doomed rows
    my ($wf, $now) = @_;
    my $rows = dbq('SELECT id, wf_name, state, wf_deps, wf_ignore, parent_id FROM belay_jobs WHERE workflow_id = $1', $wf);
    my %st;
    for my $r (@$rows) { $st{ $r->{wf_name} } = $r->{state} if defined $r->{wf_name} }
    my (%release, %doom);
    my $changed = 1;
    while ($changed) {
        $changed = 0;
        for my $r (@$rows) {
            next unless $r->{state} eq 'held';
            my $deps = $r->{wf_deps};
            $deps = parse_pg_array($deps) unless ref $deps;
            next unless $deps && @$deps;
            next if $release{ $r->{id} } || $doom{ $r->{id} };
            my $ign = $r->{wf_ignore} // [];
            $ign = parse_pg_array($ign) unless ref $ign;
            my %ign = map { ($_ => 1) } @$ign;
            my ($ok, $doomed) = (1, 0);
            for my $dep (@$deps) {
                my $s = $st{$dep};
                if (!defined $s) { $ok = 0; next }
                if ($s eq 'succeeded') { next }
                if ($s eq 'failed' || $s eq 'cancelled') {
                    if ($ign{$s}) { next }
                    $doomed = 1; $ok = 0; next;
                }
                $ok = 0;
            }
            if ($doomed) {
                $doom{ $r->{id} } = $r; $changed = 1;
                $st{ $r->{wf_name} } = 'cancelled' if defined $r->{wf_name};
            } elsif ($ok) {
                $release{ $r->{id} } = $r; $changed = 1;
                $st{ $r->{wf_name} } = 'ready' if defined $r->{wf_name};
            }
        }
    }
    if (%release) {
        dbq(q{UPDATE belay_jobs SET state = 'ready' WHERE id = ANY($1::bigint[]) AND state = 'held'},
          pg_int_array(keys %release));
    }
    my @doomed;
    if (%doom) {
        my $r = dbq(q{UPDATE belay_jobs SET state = 'cancelled', finished_at = $2::timestamptz
                    WHERE id = ANY($1::bigint[]) AND state = 'held' RETURNING id, parent_id},
                  pg_int_array(keys %doom), $now);
        @doomed = @$r;
    }
    return @doomed;
}

sub parse_pg_array {
    my ($s) = @_;
    return [] unless defined $s;
    $s =~ s/^\{|\}$//g;
    return [] unless length $s;
    return [ map { my $x = $_; $x =~ s/^"|"$//g; $x =~ s/\\(.)/$1/g; $x } split /,/, $s ];
}

# ---------------------------------------------------------------- executions (executor threads)
our %J;    # the job this executor thread runs: id, attempt, queue, worker, input, ...

sub err_entry {
    my ($now, $error, $detail) = @_;
    if (defined $detail) {
        $detail = "$detail";
        if (length(do { use bytes; $detail }) > 8192) {
            my $b = substr($detail, 0, 8192);
            $b = substr($b, 0, length($b) - 1) while length(do { use bytes; $b }) > 8192;
            $detail = $b;
        }
    }
    return jenc({ attempt => 0 + $J{attempt}, at => $now, error => $error, detail => $detail });
}

sub observe {    # soak_observations (PROTOCOL.md §4), autocommit
    my ($phase, $observed) = @_;
    retry("observe $phase", sub {
        dbq('INSERT INTO soak_observations (job_id, attempt, node, phase, observed, at) VALUES ($1, $2, $3, $4, $5::jsonb, $6::timestamptz)',
          $J{id}, $J{attempt}, $NODE, $phase, jenc($observed), now_iso());
    });
}

# ack(outcome, ...): one fenced transaction with its after-terminal steps; returns the new state
# or 'stale'. outcome: succeed(result) | error(code, detail, retryable) | cancel.
sub ack {
    my ($outcome, %a) = @_;
    # Without a workflow or a parent the after-terminal steps are empty: the fenced UPDATE alone is
    # the ack's transaction (autocommit, one round trip).
    my $needs_txn = defined $J{workflow_id} || defined $J{parent_id};
    my $state = retry("ack $J{id}", sub {
        my ($try) = @_;
        my $body = sub {
            my $now = now_iso();
            my $row;
            if ($outcome eq 'succeed') {
                $row = dbq1(q{UPDATE belay_jobs SET state = 'succeeded', result = convert_to($3, 'UTF8'),
                            finished_at = $4::timestamptz, lease_until = NULL, leased_by = NULL
                            WHERE id = $1 AND state || '' = 'running' AND attempt = $2
                            RETURNING id, state, workflow_id, parent_id},
                          $J{id}, $J{attempt}, jenc($a{result}), $now);
            } elsif ($outcome eq 'error' && $a{retryable}) {
                my $a = $J{attempt};
                my $back = 0.5 * 2 ** ($a - 1);
                $back = 4 if $back > 4;
                my $retry_at = iso_us(parse_iso_us($now) + int($back * 1_000_000));
                $row = dbq1(q{UPDATE belay_jobs SET
                              state = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'ready' END,
                              ready_at = CASE WHEN attempt >= max_attempts THEN ready_at ELSE $5::timestamptz END,
                              finished_at = CASE WHEN attempt >= max_attempts THEN $3::timestamptz ELSE finished_at END,
                              errors = errors || jsonb_build_array($4::jsonb),
                              lease_until = NULL, leased_by = NULL
                            WHERE id = $1 AND state || '' = 'running' AND attempt = $2
                            RETURNING id, state, workflow_id, parent_id},
                          $J{id}, $J{attempt}, $now, err_entry($now, $a{error}, $a{detail}), $retry_at);
            } elsif ($outcome eq 'error') {
                $row = dbq1(q{UPDATE belay_jobs SET state = 'failed', finished_at = $3::timestamptz,
                              errors = errors || jsonb_build_array($4::jsonb), lease_until = NULL, leased_by = NULL
                            WHERE id = $1 AND state || '' = 'running' AND attempt = $2
                            RETURNING id, state, workflow_id, parent_id},
                          $J{id}, $J{attempt}, $now, err_entry($now, $a{error}, $a{detail}));
            } elsif ($outcome eq 'cancel') {
                $row = dbq1(q{UPDATE belay_jobs SET state = 'cancelled', finished_at = $3::timestamptz,
                              lease_until = NULL, leased_by = NULL
                            WHERE id = $1 AND state || '' = 'running' AND attempt = $2
                            RETURNING id, state, workflow_id, parent_id},
                          $J{id}, $J{attempt}, $now);
            } else { die "unknown outcome $outcome" }
            if (!$row) {
                return 'stale' if $try == 1;
                # a retried ack whose first try may have committed: tell it from a real stale ack
                my $cur = dbq1('SELECT state, attempt FROM belay_jobs WHERE id = $1', $J{id});
                return 'stale' unless $cur && $cur->{attempt} == $J{attempt} && $cur->{state} ne 'running';
                return $cur->{state};
            }
            after_terminal($now, $row) if $row->{state} =~ /^(succeeded|failed|cancelled)$/;
            return $row->{state};
        };
        return $needs_txn ? txn($body) : $body->();
    });
    if ($state eq 'stale') {
        logmsg("stale ack of job $J{id} attempt $J{attempt} ($outcome) discarded");
        observe('ack', { state => 'stale' });
    } elsif ($J{worker} eq 'slow') {
        observe('ack', { state => $state });
    }
    return $state;
}

# The step boundary of sdk-guide §8 and the §8.2 pre-flight: before executing a step that missed
# the journal, and before every park and on every resume.
sub boundary {
    my $r = retry("preflight $J{id}", sub {
        dbq1('SELECT cancel_requested, spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens
            FROM belay_jobs WHERE id = $1', $J{id});
    });
    return unless $r;
    if ($r->{cancel_requested}) {
        ack('cancel');
        Done('cancelled');
    }
    over_budget_fail($r);
}

sub over_budget_fail {
    my ($r) = @_;
    if ((defined $r->{budget_usd_micros} && $r->{spent_usd_micros} > $r->{budget_usd_micros})
        || (defined $r->{budget_tokens} && $r->{spent_tokens} > $r->{budget_tokens})) {
        ack('error', error => 'budget_exceeded', detail => undef, retryable => 0);
        Done('budget_exceeded');
    }
}

sub read_step {
    my ($name) = @_;
    my $r = retry("read step $name", sub {
        dbq1(q{SELECT convert_from(value, 'UTF8') AS v FROM belay_steps WHERE job_id = $1 AND name = $2}, $J{id}, $name);
    });
    return $r ? ($JSON->decode($r->{v}), 1) : (undef, 0);
}

# step(name, fn, usd, tokens): §8.2 — journal hit skips execution; a miss is a boundary, then the
# function runs, then one transaction journals it (first write wins) and adds its spend.
sub step {
    my ($name, $fn, $usd, $tok) = @_;
    $usd //= 0; $tok //= 0;
    my ($v, $hit) = read_step($name);
    return $v if $hit;
    boundary();
    my $value = $fn->();
    my $enc = jenc($value);
    my ($stored, $spent) = retry("journal $name", sub {
        txn(sub {
            my $now = now_iso();
            dbq('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', $J{id});
            my $ins = dbq1(q{INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at)
                           VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1),
                                   $2, convert_to($3, 'UTF8'), $4, $5, $6::timestamptz)
                           ON CONFLICT (job_id, name) DO NOTHING RETURNING seq},
                         $J{id}, $name, $enc, $usd, $tok, $now);
            if (!$ins) {    # another execution journaled it first: its value wins, no spend
                my $r = dbq1(q{SELECT convert_from(value, 'UTF8') AS v FROM belay_steps WHERE job_id = $1 AND name = $2},
                           $J{id}, $name);
                return ($JSON->decode($r->{v}), undef);
            }
            my $sp = dbq1('UPDATE belay_jobs SET spent_usd_micros = spent_usd_micros + $2, spent_tokens = spent_tokens + $3
                         WHERE id = $1 RETURNING spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens',
                        $J{id}, $usd, $tok);
            return ($value, $sp);
        });
    });
    return ($stored, $spent) if wantarray;
    return $stored;
}

sub crossed {
    my ($r) = @_;
    return 0 unless $r;
    return (defined $r->{budget_usd_micros} && $r->{spent_usd_micros} > $r->{budget_usd_micros})
        || (defined $r->{budget_tokens} && $r->{spent_tokens} > $r->{budget_tokens});
}

sub max_after_park { 'LEAST(max_attempts::bigint + 1, 2147483647)::int' }

# await_signal(name): §7 park rule under the scope lock; a park and the resume are boundaries.
sub await_signal {
    my ($name) = @_;
    my $scope = "job:$J{id}";
    boundary();
    my $sig = retry("read signal", sub {
        dbq1('SELECT payload::text AS p FROM belay_signals WHERE scope = $1 AND name = $2', $scope, $name);
    });
    return defined $sig->{p} ? $JSON->decode($sig->{p}) : undef if $sig;
    my $res = retry("park $J{id}", sub {
        txn(sub {
            my $now = now_iso();
            dbq('SELECT pg_advisory_xact_lock(hashtext($1))', "belay_sig:$scope");
            my $present = dbq1('SELECT 1 AS x FROM belay_signals WHERE scope = $1 AND name = $2', $scope, $name);
            my $ma = max_after_park();
            my $row;
            if ($present) {
                $row = dbq1(qq{UPDATE belay_jobs SET state = 'ready', ready_at = \$3::timestamptz, await_scope = NULL,
                               await_name = NULL, max_attempts = $ma, lease_until = NULL, leased_by = NULL
                             WHERE id = \$1 AND state || '' = 'running' AND attempt = \$2 RETURNING id},
                          $J{id}, $J{attempt}, $now);
            } else {
                $row = dbq1(qq{UPDATE belay_jobs SET state = 'awaiting', ready_at = NULL, await_scope = \$3,
                               await_name = \$4, max_attempts = $ma, lease_until = NULL, leased_by = NULL
                             WHERE id = \$1 AND state || '' = 'running' AND attempt = \$2 RETURNING id},
                          $J{id}, $J{attempt}, $scope, $name);
            }
            return $row ? ($present ? 'ready' : 'awaiting') : 'stale';
        });
    });
    observe('ack', { state => 'stale' }) if $res eq 'stale';
    Done("parked ($res)");
}

# sleep_durable(name, seconds): the reserved step $sleep:<name> holds the wake time; journal and
# park (ready at the wake time, max_attempts + 1) in one transaction; a resume past it returns.
sub sleep_durable {
    my ($name, $secs) = @_;
    my $step = "\$sleep:$name";
    my ($v, $hit) = read_step($step);
    if ($hit && parse_iso_us($v) <= now_us()) { return }
    boundary();
    my $res = retry("sleep $J{id}", sub {
        txn(sub {
            my $now = now_us();
            my $wake = iso_us($now + int($secs * 1_000_000));
            dbq('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', $J{id});
            my $ins = dbq1(q{INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at)
                           VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1),
                                   $2, convert_to($3, 'UTF8'), 0, 0, $4::timestamptz)
                           ON CONFLICT (job_id, name) DO NOTHING RETURNING seq},
                         $J{id}, $step, jenc($wake), iso_us($now));
            if (!$ins) {
                my $r = dbq1(q{SELECT convert_from(value, 'UTF8') AS v FROM belay_steps WHERE job_id = $1 AND name = $2},
                           $J{id}, $step);
                $wake = $JSON->decode($r->{v});
            }
            my $ma = max_after_park();
            my $row = dbq1(qq{UPDATE belay_jobs SET state = 'ready', ready_at = \$3::timestamptz, max_attempts = $ma,
                              lease_until = NULL, leased_by = NULL
                            WHERE id = \$1 AND state || '' = 'running' AND attempt = \$2 RETURNING id},
                         $J{id}, $J{attempt}, $wake);
            die bless { msg => 'stale sleep' }, 'Belay::StaleSleep' unless $row;
            return 'slept';
        });
    });
    Done('sleeping');
}

# spawn(name, specs): §8.4, doubly idempotent — memoized $spawn:<name>, always keys, ids by key.
sub spawn {
    my ($name, @specs) = @_;
    my $step = "\$spawn:$name";
    my ($v, $hit) = read_step($step);
    return @$v if $hit;
    boundary();
    my $ids = retry("spawn $J{id}", sub {
        txn(sub {
            my $now = now_iso();
            dbq('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', $J{id});
            my $have = dbq1(q{SELECT convert_from(value, 'UTF8') AS v FROM belay_steps WHERE job_id = $1 AND name = $2},
                          $J{id}, $step);
            return $JSON->decode($have->{v}) if $have;
            my @keys;
            for my $i (0 .. $#specs) {
                my $key = "\$spawn:$J{id}:$name:$i";
                push @keys, $key;
                dbq(q{INSERT INTO belay_jobs (queue, worker, input, state, priority, attempt, max_attempts, ready_at,
                        inserted_at, errors, spent_usd_micros, spent_tokens, cancel_requested, parent_id,
                        unique_key, unique_mode)
                    VALUES ($1, $2, $3::jsonb, 'ready', 0, 0, 20, $4::timestamptz, $4::timestamptz, '[]'::jsonb,
                        0, 0, false, $5, $6, 'always')
                    ON CONFLICT DO NOTHING},
                  $specs[$i]{queue}, $specs[$i]{worker}, jenc($specs[$i]{input}), $now, $J{id}, $key);
            }
            my $rows = dbq(q{SELECT id, unique_key FROM belay_jobs WHERE unique_key = ANY($1::text[])
                           AND unique_mode IN ('window', 'always')}, pg_text_array(@keys));
            my %by = map { ($_->{unique_key} => 0 + $_->{id}) } @$rows;
            my @list = map { $by{$_} // die "spawned child $_ missing" } @keys;
            dbq(q{INSERT INTO belay_steps (job_id, seq, name, value, usd_micros, tokens, inserted_at)
                VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_steps WHERE job_id = $1),
                        $2, convert_to($3, 'UTF8'), 0, 0, $4::timestamptz)
                ON CONFLICT (job_id, name) DO NOTHING},
              $J{id}, $step, jenc(\@list), $now);
            return \@list;
        });
    });
    return @$ids;
}

# await_children: all terminal → continue; else under the scope lock clear $children, re-verify, park.
sub await_children {
    boundary();
    my $live = retry("children", sub {
        dbq1("SELECT count(*) AS n FROM belay_jobs WHERE parent_id = \$1 AND state NOT IN $TERMINAL", $J{id})->{n};
    });
    return if $live == 0;
    my $scope = "job:$J{id}";
    my $res = retry("await children $J{id}", sub {
        txn(sub {
            my $now = now_iso();
            dbq('SELECT pg_advisory_xact_lock(hashtext($1))', "belay_sig:$scope");
            dbq('DELETE FROM belay_signals WHERE scope = $1 AND name = $2', $scope, '$children');
            my $n = dbq1("SELECT count(*) AS n FROM belay_jobs WHERE parent_id = \$1 AND state NOT IN $TERMINAL", $J{id})->{n};
            return 'done' if $n == 0;
            my $ma = max_after_park();
            my $row = dbq1(qq{UPDATE belay_jobs SET state = 'awaiting', ready_at = NULL, await_scope = \$3,
                              await_name = \$4, max_attempts = $ma, lease_until = NULL, leased_by = NULL
                            WHERE id = \$1 AND state || '' = 'running' AND attempt = \$2 RETURNING id},
                         $J{id}, $J{attempt}, $scope, '$children');
            return $row ? 'awaiting' : 'stale';
        });
    });
    return if $res eq 'done';
    observe('ack', { state => 'stale' }) if $res eq 'stale';
    Done("children ($res)");
}

sub emit_event {    # idempotent: a retry looks for the event it was appending
    my ($payload) = @_;
    my $enc = jenc($payload);
    retry("emit $J{id}", sub {
        txn(sub {
            my $now = now_iso();
            dbq('SELECT id FROM belay_jobs WHERE id = $1 FOR UPDATE', $J{id});
            my $have = dbq1('SELECT seq FROM belay_events WHERE job_id = $1 AND payload = $2::jsonb', $J{id}, $enc);
            return if $have;
            dbq(q{INSERT INTO belay_events (job_id, seq, payload, inserted_at)
                VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM belay_events WHERE job_id = $1), $2::jsonb, $3::timestamptz)},
              $J{id}, $enc, $now);
        });
    });
}

sub self_kill {    # PROTOCOL.md §1: record the exit, then die abruptly without acking
    my ($reason) = @_;
    observe('exit', { reason => $reason });
    logmsg("deliberate exit: $reason (job $J{id} attempt $J{attempt})");
    POSIX::_exit(75);
}

sub msleep { my $ms = shift // 0; sleep($ms / 1000) if $ms > 0 }

# ---------------------------------------------------------------- the nine kinds (PROTOCOL.md §3)
sub tokval { { token => token(), attempt => 0 + $J{attempt} } }

my %KINDS = (
    echo => sub {
        my ($in) = @_;
        return { echo => $in->{v}, attempt => 0 + $J{attempt} };
    },
    steps => sub {
        my ($in) = @_;
        my @tokens;
        for my $i (1 .. $in->{n}) {
            my $v = step("s$i", \&tokval);
            push @tokens, $v->{token};
            msleep($in->{pause_ms});
            Retry('raise_after', "raised after step s$i")
                if $J{attempt} == 1 && defined $in->{raise_after} && $in->{raise_after} == $i;
        }
        return { tokens => \@tokens, attempt => 0 + $J{attempt} };
    },
    costed => sub {
        my ($in) = @_;
        my @tokens;
        my $i = 0;
        for my $u (@{ $in->{costs} }) {
            $i++;
            my ($v, $spent) = step("c$i", \&tokval, $u, 0);
            push @tokens, $v->{token};
            if (crossed($spent)) {
                self_kill('crash_at_crossing') if $in->{crash_at_crossing} && $J{attempt} == 1;
                ack('error', error => 'budget_exceeded', detail => "step c$i crossed the budget", retryable => 0);
                Done('budget_exceeded');
            }
        }
        # re-check durable spend before a budgeted job succeeds (decisions.md)
        my $r = retry('budget', sub { dbq1('SELECT spent_usd_micros, spent_tokens, budget_usd_micros, budget_tokens FROM belay_jobs WHERE id = $1', $J{id}) });
        over_budget_fail($r) if $r;
        return { tokens => \@tokens, attempt => 0 + $J{attempt} };
    },
    awaiter => sub {
        my ($in) = @_;
        msleep($in->{pause_ms});
        my $payload = await_signal($in->{signal});
        return { payload => $payload, attempt => 0 + $J{attempt} };
    },
    parent => sub {
        my ($in) = @_;
        my $q = $in->{queue} // 'soak';
        my $p = $in->{child_pause_ms} // 0;
        my @specs = map {
            $p > 0 ? { queue => $q, worker => 'steps', input => { n => 1, raise_after => undef, pause_ms => $p } }
                   : { queue => $q, worker => 'echo', input => { v => "child-$_" } }
        } 0 .. ($in->{children} - 1);
        my @ids = spawn('kids', @specs);
        await_children();
        return { children => [ map { 0 + $_ } @ids ], attempt => 0 + $J{attempt} };
    },
    member => sub {
        my ($in) = @_;
        Fail('member_failed', "member $in->{member} fails on purpose") if $in->{fail};
        return { member => $in->{member}, attempt => 0 + $J{attempt} };
    },
    flaky => sub {
        my ($in) = @_;
        my $pre = step('pre', \&tokval);
        my $mid = step('mid', sub {
            if ($J{attempt} <= $in->{until_attempt}) {
                self_kill('flaky exit') if $in->{mode} eq 'exit';
                Retry('flaky', "flaky raise on attempt $J{attempt}");
            }
            return tokval();
        });
        return { tokens => [ $pre->{token}, $mid->{token} ], attempt => 0 + $J{attempt} };
    },
    slow => sub {
        my ($in) = @_;
        emit_event({ phase => 'start', attempt => 0 + $J{attempt}, node => $NODE });
        my $begin = step('begin', \&tokval);
        step('nap', sub { sleep($in->{seconds}); return tokval() }, 1, 0);
        my $row = retry('pre_ack read', sub { dbq1('SELECT state, attempt, leased_by FROM belay_jobs WHERE id = $1', $J{id}) });
        observe('pre_ack', { state => $row->{state}, attempt => 0 + $row->{attempt}, leased_by => $row->{leased_by} });
        return { token => $begin->{token}, node => $NODE, attempt => 0 + $J{attempt} };
    },
    sleeper => sub {
        my ($in) = @_;
        my $pre = step('pre', \&tokval);
        sleep_durable('nap', $in->{seconds});
        my $post = step('post', \&tokval);
        return { tokens => [ $pre->{token}, $post->{token} ], attempt => 0 + $J{attempt} };
    },
);

sub run_job {
    my ($job) = @_;
    local %J = %$job;
    my $kind = $KINDS{ $J{worker} };
    my $in = ref $J{input} ? $J{input} : $JSON->decode($J{input} // '{}');
    my $result = eval {
        Fail('unknown_kind', "no kind $J{worker}") unless $kind;
        $kind->($in);
    };
    my $e = $@;
    eval {
        if (!$e) {
            ack('succeed', result => $result);
        } elsif (ref $e eq 'Belay::Done') {
            # acked or parked already
        } elsif (ref $e eq 'Belay::Retry') {
            ack('error', error => $e->{error}, detail => $e->{detail}, retryable => 1);
        } elsif (ref $e eq 'Belay::Fail') {
            ack('error', error => $e->{error}, detail => $e->{detail}, retryable => 0);
        } elsif (ref $e eq 'Belay::StaleSleep') {
            observe('ack', { state => 'stale' });
        } else {
            my $msg = ref $e ? ($e->{msg} // ref $e) : "$e";
            logmsg("job $J{id} ($J{worker}) raised: $msg");
            ack('error', error => 'exception', detail => $msg, retryable => 1);
        }
        1;
    } or do {
        my $x = $@;
        logmsg("ack of job $J{id} failed: " . (ref $x ? ($x->{msg} // ref $x) : $x));
    };
}

sub block_term {
    POSIX::sigprocmask(POSIX::SIG_BLOCK(), POSIX::SigSet->new(POSIX::SIGTERM(), POSIX::SIGINT()));
}

sub executor_main {
    block_term();
    while (defined(my $item = $JOBQ->dequeue)) {
        my $job = $JSON->decode($item);
        run_job($job);
        {
            lock(%RUNNING);
            delete $RUNNING{ $job->{id} } if ($RUNNING{ $job->{id} } // -1) == $job->{attempt};
            delete $LOST{"$job->{id}:$job->{attempt}"};
            $QRUN{ $job->{queue} }--;
            $NRUN--;
            cond_signal(%RUNNING);
        }
    }
}

# ---------------------------------------------------------------- renewer (§6: every ttl/3)
sub renewer_main {
    block_term();
    my $period = $TTL / 3;
    my $next = time();
    while (1) {
        my $t = time();
        if ($t < $next) { sleep(($next - $t) > 0.05 ? 0.05 : $next - $t); next }
        my %held;
        { lock(%RUNNING); %held = %RUNNING; }
        if (!%held) { $next = $t + 0.2; next }
        my $ok = eval {
            my $now = now_us();
            my $rows = dbq(q{UPDATE belay_jobs SET lease_until = $2::timestamptz
                           WHERE id = ANY($1::bigint[]) AND state = 'running' AND leased_by = $3 RETURNING id},
                         pg_int_array(keys %held), iso_us($now + int($TTL * 1_000_000)), $NODE);
            my %got = map { ($_->{id} => 1) } @$rows;
            for my $id (keys %held) {
                next if $got{$id};
                lock(%RUNNING);
                next unless defined $RUNNING{$id} && $RUNNING{$id} == $held{$id};
                $LOST{"$id:$held{$id}"} = 1;
            }
            1;
        };
        if ($ok) { $next = $t + $period }
        else {
            my $e = $@;
            logmsg('renewal failed: ' . (ref $e ? $e->{msg} : $e));
            drop_conn() unless is_transient($e);
            $next = time() + 0.3;
        }
    }
}

# ---------------------------------------------------------------- sweeper (reclaim, reconciler, crons)
sub reclaim_pass {
    my $ids = dbq(q{SELECT id FROM belay_jobs WHERE state = 'running' AND lease_until <= $1::timestamptz
                  ORDER BY lease_until LIMIT 200}, now_iso());
    for my $r (@$ids) {
        txn(sub {
            my $nus = now_us();
            my $now = iso_us($nus);
            my $row = dbq1(q{SELECT id, attempt, max_attempts, workflow_id, parent_id FROM belay_jobs
                           WHERE id = $1 AND state = 'running' AND lease_until <= $2::timestamptz
                           FOR UPDATE SKIP LOCKED}, $r->{id}, $now);
            return unless $row;
            my $entry = jenc({ attempt => 0 + $row->{attempt}, at => $now, error => 'lease_expired', detail => undef });
            if ($row->{attempt} < $row->{max_attempts}) {
                my $back = 2 ** ($row->{attempt} - 1);
                $back = 8 if $back > 8;
                dbq(q{UPDATE belay_jobs SET state = 'ready', ready_at = $2::timestamptz,
                      errors = errors || jsonb_build_array($3::jsonb), lease_until = NULL, leased_by = NULL
                    WHERE id = $1}, $row->{id}, iso_us($nus + int($back * 1_000_000)), $entry);
                logmsg("reclaimed job $row->{id} attempt $row->{attempt} (retry)");
            } else {
                dbq(q{UPDATE belay_jobs SET state = 'failed', finished_at = $2::timestamptz,
                      errors = errors || jsonb_build_array($3::jsonb), lease_until = NULL, leased_by = NULL
                    WHERE id = $1}, $row->{id}, $now, $entry);
                after_terminal($now, $row);
                logmsg("reclaimed job $row->{id} attempt $row->{attempt} (failed: last attempt)");
            }
        });
    }
}

sub reconcile_pass {    # §8.4 R2
    my ($rows, $n) = dbq(q{UPDATE belay_jobs p SET state = 'ready', ready_at = $1::timestamptz, await_scope = NULL, await_name = NULL
        WHERE p.state = 'awaiting' AND p.await_name = '$children' AND p.await_scope = 'job:' || p.id
          AND EXISTS (SELECT 1 FROM belay_jobs c WHERE c.parent_id = p.id)
          AND NOT EXISTS (SELECT 1 FROM belay_jobs c WHERE c.parent_id = p.id
                          AND c.state NOT IN ('succeeded','failed','cancelled'))}, now_iso());
    logmsg("reconciler woke $n parent(s)") if $n && $n > 0;
}

my %MON = (JAN => 1, FEB => 2, MAR => 3, APR => 4, MAY => 5, JUN => 6, JUL => 7, AUG => 8, SEP => 9, OCT => 10, NOV => 11, DEC => 12);
my %DOW = (SUN => 0, MON => 1, TUE => 2, WED => 3, THU => 4, FRI => 5, SAT => 6);

sub cron_field {    # -> (hashref of allowed values, is_star)
    my ($f, $lo, $hi, $names) = @_;
    my %ok;
    my $star = ($f eq '*' || $f eq '?');
    for my $part (split /,/, $f) {
        my ($range, $stepv) = split m{/}, $part, 2;
        my $st = defined $stepv ? $stepv : 1;
        die "bad step" unless $st =~ /^\d+$/ && $st > 0;
        my ($a, $b);
        if ($range eq '*' || $range eq '?') { ($a, $b) = ($lo, $hi) }
        else {
            my ($x, $y) = split /-/, $range, 2;
            for ($x, $y) { next unless defined; $_ = $names->{ uc $_ } if $names && exists $names->{ uc $_ }; die "bad cron value $_" unless /^\d+$/ }
            $a = $x;
            $b = defined $y ? $y : (defined $stepv ? $hi : $x);
        }
        for (my $v = $a; $v <= $b; $v += $st) { $ok{$v} = 1 }
    }
    return (\%ok, $star);
}

sub cron_matches {
    my ($expr, $t) = @_;
    my @f = split ' ', $expr;
    die "cron needs five fields" unless @f == 5;
    my @g = gmtime($t);
    my ($min) = cron_field($f[0], 0, 59);
    my ($hr)  = cron_field($f[1], 0, 23);
    my ($dom, $domstar) = cron_field($f[2], 1, 31);
    my ($mon) = cron_field($f[3], 1, 12, \%MON);
    my ($dow, $dowstar) = cron_field($f[4], 0, 7, \%DOW);
    $dow->{0} = 1 if $dow->{7};
    return 0 unless $min->{ $g[1] } && $hr->{ $g[2] } && $mon->{ $g[4] + 1 };
    my $d1 = $dom->{ $g[3] } ? 1 : 0;
    my $d2 = $dow->{ $g[6] } ? 1 : 0;
    return ($domstar || $dowstar) ? ($d1 && $d2) : ($d1 || $d2);
}

my $CRON_SINCE;    # microseconds
sub cron_pass {
    my $nus = now_us();
    $CRON_SINCE //= $nus - 60_000_000;
    my $since = $CRON_SINCE;
    my $now = iso_us($nus);
    txn(sub {
        my $rows = dbq(q{SELECT name, expression, worker, input::text AS input, opts::text AS opts FROM belay_crons
                       WHERE NOT paused ORDER BY name FOR SHARE});
        for my $c (@$rows) {
            my $opts = eval { $JSON->decode($c->{opts} // '{}') } // {};
            my $first = int($since / 60_000_000) * 60 + 60;    # first whole minute after since
            my $last = int($nus / 60_000_000) * 60;
            $first = $last - 3600 if $last - $first > 3600;
            for (my $t = $first; $t <= $last; $t += 60) {
                next unless $t * 1_000_000 > $since;
                my $m = eval { cron_matches($c->{expression}, $t) };
                if ($@) { logmsg("cron $c->{name}: $@"); last }
                next unless $m;
                my (undef, $n) = dbq(q{INSERT INTO belay_jobs (queue, worker, input, state, priority, attempt, max_attempts,
                        ready_at, inserted_at, errors, spent_usd_micros, spent_tokens, cancel_requested, cron_name, cron_slot)
                      VALUES ($1, $2, $3::jsonb, 'ready', $4, 0, $5, $6::timestamptz, $6::timestamptz, '[]'::jsonb, 0, 0, false,
                        $7, to_timestamp($8))
                      ON CONFLICT DO NOTHING},
                    $opts->{queue} // 'default', $c->{worker}, $c->{input} // '{}', $opts->{priority} // 0,
                    $opts->{max_attempts} // 20, $now, $c->{name}, $t);
                logmsg("cron $c->{name} slot " . iso_us($t * 1_000_000) . " inserted") if $n && $n > 0;
            }
        }
    });
    $CRON_SINCE = $nus;
}

sub sweeper_main {
    block_term();
    while (1) {
        my $t = time();
        for my $pass ([reclaim => \&reclaim_pass], [reconcile => \&reconcile_pass], [cron => \&cron_pass]) {
            eval { $pass->[1]->(); 1 } or do {
                my $e = $@;
                logmsg("sweeper $pass->[0]: " . (ref $e ? ($e->{msg} // ref $e) : $e));
                drop_conn() if is_transient($e);
            };
        }
        my $left = 1.0 - (time() - $t);
        sleep($left) if $left > 0;
    }
}

# ---------------------------------------------------------------- claims (main thread, §6)
my %QOPTS;    # queue => opts hash
sub load_queue_opts {
    my $rows = dbq('SELECT name, opts::text AS opts FROM belay_queues WHERE name = ANY($1::text[])', pg_text_array(@QUEUES));
    my %n = map { ($_ => {}) } @QUEUES;
    for my $r (@$rows) { $n{ $r->{name} } = eval { $JSON->decode($r->{opts}) } // {} }
    %QOPTS = %n;
}

sub qlimit {
    my ($o) = @_;
    my $l = $o->{limit} // 10;
    $l = $l->{max} // 10 if ref $l eq 'HASH';
    return $l;
}

sub claim_rows {
    my ($q, $take, $now) = @_;
    (my $pred = $CLAIMABLE) =~ s/\$NOW/\$2/g;
    my $until = iso_us(parse_iso_us($now) + int($TTL * 1_000_000));
    return dbq(qq{WITH r AS (SELECT id, priority, ready_at FROM belay_jobs
                           WHERE queue = \$1 AND state = 'ready' AND (ready_at IS NULL OR ready_at <= \$2::timestamptz)
                           ORDER BY priority, ready_at NULLS FIRST, id LIMIT \$3 FOR UPDATE SKIP LOCKED),
                     a AS (SELECT id, priority, ready_at FROM belay_jobs
                           WHERE queue = \$1 AND state = 'awaiting' AND ready_at <= \$2::timestamptz
                           ORDER BY priority, ready_at, id LIMIT \$3 FOR UPDATE SKIP LOCKED),
                     c AS (SELECT id FROM (SELECT * FROM r UNION ALL SELECT * FROM a) u
                           ORDER BY priority, ready_at NULLS FIRST, id LIMIT \$3)
                UPDATE belay_jobs j SET state = 'running', attempt = j.attempt + 1, lease_until = \$4::timestamptz,
                       leased_by = \$5, started_at = COALESCE(j.started_at, \$2::timestamptz)
                FROM c WHERE j.id = c.id
                RETURNING j.id, j.queue, j.worker, j.input::text AS input, j.attempt, j.max_attempts,
                          j.workflow_id, j.parent_id},
             $q, $now, $take, $until, $NODE);
}

sub claim_ids {
    my ($ids, $now) = @_;
    my $until = iso_us(parse_iso_us($now) + int($TTL * 1_000_000));
    return dbq(q{UPDATE belay_jobs j SET state = 'running', attempt = j.attempt + 1, lease_until = $3::timestamptz,
                   leased_by = $4, started_at = COALESCE(j.started_at, $2::timestamptz)
               WHERE j.id = ANY($1::bigint[])
               RETURNING j.id, j.queue, j.worker, j.input::text AS input, j.attempt, j.max_attempts,
                         j.workflow_id, j.parent_id},
             pg_int_array(@$ids), $now, $until, $NODE);
}

sub round_half_away { my ($num, $den) = @_; return int((2 * $num + $den) / (2 * $den)) }    # num, den >= 0

sub claim {
    my ($q, $take) = @_;
    my $o = $QOPTS{$q} // {};
    my $admit = defined $o->{global_limit} || $o->{rate} || $o->{partition};
    return claim_rows($q, $take, now_iso()) unless $admit;
    return txn(sub {
        dbq('SELECT pg_advisory_xact_lock(hashtext($1))', "belay:$q");
        my $nus = now_us();
        my $now = iso_us($nus);
        if (defined $o->{global_limit} || $o->{partition}) {
            dbq(q{SELECT id FROM belay_jobs WHERE queue = $1 AND state = 'running' AND lease_until <= $2::timestamptz FOR UPDATE},
              $q, $now);
        }
        if (defined $o->{global_limit}) {
            my $n = dbq1(q{SELECT count(*) AS n FROM belay_jobs WHERE queue = $1 AND state = 'running'
                         AND lease_until > $2::timestamptz}, $q, $now)->{n};
            my $allowed = $o->{global_limit} - $n;
            $take = $allowed if $allowed < $take;
        }
        my ($bucket, $w, $est);
        if ($o->{rate}) {
            my $r = $o->{rate};
            my $period = $r->{period} // 1;
            $est = $r->{estimate} // 1;
            $est = 1 if $est < 1;
            $bucket = defined $r->{resource} ? "resource:$r->{resource}" : "queue:$q";
            my $pus = $period * 1_000_000;
            my $wus = int($nus / $pus) * $pus;
            $w = $wus / 1_000_000;
            my $rows = dbq(q{SELECT extract(epoch FROM window_start)::bigint AS w, count FROM belay_rate
                           WHERE bucket = $1 AND window_start IN (to_timestamp($2), to_timestamp($3))},
                         $bucket, $w, $w - $period);
            my ($cur, $prev) = (0, 0);
            for (@$rows) { if ($_->{w} == $w) { $cur = $_->{count} } else { $prev = $_->{count} } }
            my $used = $cur + round_half_away($prev * ($pus - ($nus - $wus)), $pus);
            my $room = $r->{allowed} - $used;
            $room = $r->{allowed} if $room > $r->{allowed};
            $room = 0 if $room < 0;
            my $n = int($room / $est);
            $take = $n if $n < $take;
        }
        return [] if $take <= 0;
        my $rows;
        if ($o->{partition}) {
            my $field = ($o->{partition}{field} // 'input') eq 'meta' ? 'meta' : 'input';
            my $key = $o->{partition}{key};
            my $plimit = defined $o->{global_limit} ? $o->{global_limit} : qlimit($o);
            (my $pred = $CLAIMABLE) =~ s/\$NOW/\$3/g;
            my $ids = dbq(qq{WITH cand AS (
                    SELECT id, priority, ready_at, COALESCE($field->>\$2, '') AS k,
                           row_number() OVER (PARTITION BY COALESCE($field->>\$2, '')
                                              ORDER BY priority, ready_at NULLS FIRST, id) AS rn
                    FROM belay_jobs WHERE queue = \$1 AND $pred),
                  run AS (SELECT COALESCE($field->>\$2, '') AS k, count(*) AS n FROM belay_jobs
                          WHERE queue = \$1 AND state = 'running' AND lease_until > \$3::timestamptz GROUP BY 1)
                SELECT cand.id FROM cand LEFT JOIN run ON run.k = cand.k
                WHERE cand.rn <= GREATEST(\$4 - COALESCE(run.n, 0), 0)
                ORDER BY cand.priority, cand.ready_at NULLS FIRST, cand.id LIMIT \$5},
                $q, $key, $now, $plimit, $take);
            $rows = @$ids ? claim_ids([ map { $_->{id} } @$ids ], $now) : [];
        } else {
            $rows = claim_rows($q, $take, $now);
        }
        if ($o->{rate} && @$rows) {
            dbq(q{INSERT INTO belay_rate (bucket, window_start, count) VALUES ($1, to_timestamp($2), $3)
                ON CONFLICT (bucket, window_start) DO UPDATE SET count = belay_rate.count + EXCLUDED.count},
              $bucket, $w, scalar(@$rows) * $est);
        }
        return $rows;
    });
}

# ---------------------------------------------------------------- main
sub main {
    my @threads;
    push @threads, threads->create(\&executor_main) for 1 .. $SLOTS;
    push @threads, threads->create(\&renewer_main);
    push @threads, threads->create(\&sweeper_main);
    $_->detach for @threads;
    logmsg("started: queues @QUEUES, ttl $TTL, offset $OFFSET, slots $SLOTS");

    # §1: check the contract major and the migration at startup (retrying while the database is away)
    my $meta = retry('meta', sub { dbq1('SELECT version, contract_major FROM belay_meta') });
    if (!$meta || $meta->{contract_major} != 1 || $meta->{version} < 3) {
        logmsg('unsupported schema: contract_major ' . ($meta->{contract_major} // '?') . ' version ' . ($meta->{version} // '?'));
        sleep(1) while 1;    # never exit by itself (P1); nothing to do
    }
    my $mc = eval { dbq1("SELECT current_setting('max_connections') AS m, (SELECT count(*) FROM pg_stat_activity) AS n") };
    logmsg("server max_connections $mc->{m}, sessions now $mc->{n}") if $mc;
    retry('queue options', \&load_queue_opts);
    my $opts_at = time();
    my $rot = 0;
    my $backoff = 0.05;
    while (!$TERM) {
        if (time() - $opts_at > 5) {
            eval { load_queue_opts(); 1 } or logmsg('queue options: ' . (ref $@ ? $@->{msg} : $@));
            $opts_at = time();
        }
        my $got = 0;
        my $failed = 0;
        my @order = map { $QUEUES[ ($rot + $_) % @QUEUES ] } 0 .. $#QUEUES;
        $rot++;
        for my $q (@order) {
            last if $TERM;
            my ($free, $mine);
            { lock(%RUNNING); $free = $SLOTS - $NRUN; $mine = $QRUN{$q} // 0; }
            last if $free <= 0;
            my $lim = qlimit($QOPTS{$q} // {}) - $mine;
            my $take = $free < $lim ? $free : $lim;
            next if $take <= 0;
            my $rows = eval { claim($q, $take) };
            if (!$rows) {
                my $e = $@;
                logmsg("claim $q: " . (ref $e ? ($e->{msg} // ref $e) : $e));
                drop_conn() unless is_transient($e);
                $failed = 1;
                last;
            }
            for my $r (@$rows) {
                {
                    lock(%RUNNING);
                    $RUNNING{ $r->{id} } = $r->{attempt};
                    $QRUN{$q}++;
                    $NRUN++;
                }
                $JOBQ->enqueue(jenc($r));
            }
            $got += @$rows;
        }
        if ($failed) { sleep($backoff); $backoff = $backoff * 2 > 1 ? 1 : $backoff * 2; next }
        $backoff = 0.05;
        my $free;
        { lock(%RUNNING); $free = $SLOTS - $NRUN; }
        if ($free <= 0) {    # every slot busy: wait for one to free (or 0.25 s)
            lock(%RUNNING);
            cond_timedwait(%RUNNING, time() + 0.25) if $SLOTS - $NRUN <= 0 && !$TERM;
        } else {
            sleep($got ? 0.01 : 0.15);
        }
    }
    # SIGTERM: claiming stopped; let running jobs finish within the grace, then exit 0.
    my $t0 = time();
    my $n;
    { lock(%RUNNING); $n = $NRUN; }
    logmsg("SIGTERM: stopped claiming, draining $n running job(s)");
    while (time() - $t0 < $GRACE) {
        { lock(%RUNNING); $n = $NRUN; }
        last if $n <= 0;
        sleep(0.05);
    }
    logmsg("drain done after " . sprintf('%.1f', time() - $t0) . " s, $n job(s) left to lease expiry");
    POSIX::_exit(0);
}

main();
