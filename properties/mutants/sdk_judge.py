"""Mutants of the SDK adapter judge (properties/sdk/): bugs planted in the harness, the codec, the state
machine over an adapter, the conformance runner and the command line that properties/test_sdk_adapter.py let
pass (the SDK-judge mutation hunt). Each is killed by a test in tests/test_sdk_judge_edges.py, which fails
with the mutant and passes on the clean tree.

Not wired into the runner (which patches impl/ and soak/ only); the suite names the hunt's file first.
"""

from __future__ import annotations

from properties.mutants.kinds import Edit, Mutant

SDK_JUDGE_SUITE = ("tests/test_sdk_judge_edges.py", "properties/test_sdk_adapter.py")

SDK_JUDGE: tuple[Mutant, ...] = (
    Mutant(
        "sdkjudge_protocol_unchecked",
        (
            "the handshake accepts an adapter that states no protocol version, or an older one (only a"
            " newer one is refused)"
        ),
        "§sdk-adapter Handshake",
        (
            Edit(
                "properties/sdk/harness.py",
                '        if result.get("protocol") != PROTOCOL:\n',
                '        if result.get("protocol", PROTOCOL) > PROTOCOL:\n',
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_worker_missing_worker_ops_only",
        (
            "a worker-level handshake is checked for the worker operations only: a worker SDK lacking"
            " a client operation is accepted (its client cases then done by the reference or skipped)"
        ),
        "§sdk-adapter Handshake",
        (
            Edit(
                "properties/sdk/harness.py",
                "from properties.sdk.codec import ALL_OPS, ERROR_CLASSES, WireError, encode_op, from_wire\n",
                (
                    "from properties.sdk.codec import ALL_OPS, ERROR_CLASSES, WORKER_OPS, WireError,"
                    " encode_op, from_wire\n"
                ),
            ),
            Edit(
                "properties/sdk/harness.py",
                "        missing = sorted(set(ALL_OPS) - set(named))\n",
                "        missing = sorted(set(WORKER_OPS) - set(named))\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_reply_without_id_accepted",
        "a reply without an id is taken as the answer to the pending request",
        "§sdk-adapter Transport",
        (
            Edit(
                "properties/sdk/harness.py",
                '        if reply.get("id") != request["id"]:\n',
                '        if reply.get("id", request["id"]) != request["id"]:\n',
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_ok_not_bool",
        'a reply whose ok is not true/false (1, "true") is accepted and read by truthiness',
        "§sdk-adapter Transport",
        (
            Edit(
                "properties/sdk/harness.py",
                '        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):\n',
                '        if not isinstance(reply, dict) or "ok" not in reply:\n',
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_result_missing_accepted",
        "ok: true without a result is read as a null result, not a malformed reply",
        "§sdk-adapter Transport",
        (
            Edit(
                "properties/sdk/harness.py",
                (
                    '            if "result" not in reply:\n'
                    '                raise AdapterFailure("malformed reply", "ok: true without a result",'
                    " request)\n"
                    '            return reply["result"]\n'
                ),
                '            return reply.get("result")\n',
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_unknown_error_as_internal",
        (
            "an error class outside the protocol is reported as an SDK exception (Internal-like), not"
            " as an unknown error class"
        ),
        "§sdk-adapter Errors",
        (
            Edit(
                "properties/sdk/harness.py",
                '        if error == "Internal":\n            raise AdapterError("Internal", text, request)\n',
                ("        if error not in ERROR_CLASSES:\n            raise AdapterError(str(error), text, request)\n"),
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_judged_counts_unsupported",
        ("an operation the SDK answered Unsupported (done by the reference) is counted as answered by the SDK"),
        "§sdk-adapter Handshake (the report counts what your SDK answered)",
        (
            Edit(
                "properties/sdk/harness.py",
                "        self.last_request = message\n        try:\n",
                "        self.last_request = message\n        self.judged[name] += 1\n        try:\n",
            ),
            Edit(
                "properties/sdk/harness.py",
                "        self.judged[name] += 1\n        try:\n            return from_wire",
                "        try:\n            return from_wire",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_commit_app_row_unchecked",
        (
            "after a transactional enqueue's commit the application row is not looked for: an SDK"
            " whose enqueue and caller's row commit apart passes"
        ),
        "§5.1",
        (
            Edit(
                "properties/sdk/harness.py",
                "        self.store.tx_open = False\n        if not self._app_row():\n",
                "        self.store.tx_open = False\n        if False and not self._app_row():\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_bool_accepts_int",
        ("the codec accepts 0/1 for a boolean field (1 == True in Python: the model comparison then passes)"),
        "§sdk-adapter Values",
        (
            Edit(
                "properties/sdk/codec.py",
                "        if not isinstance(data, bool):\n",
                "        if not isinstance(data, (bool, int)):\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_int_accepts_float",
        ("the codec accepts a float for an integer field (1.0 == 1 in Python: the model comparison then passes)"),
        "§sdk-adapter Values",
        (
            Edit(
                "properties/sdk/codec.py",
                "        if isinstance(data, bool) or not isinstance(data, int):\n",
                "        if isinstance(data, bool) or not isinstance(data, (int, float)):\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_internal_as_invalid_input",
        (
            "the state machine compares an SDK's Internal error as InvalidInput: an SDK that throws"
            " where the contract refuses the input passes"
        ),
        "§sdk-adapter Errors",
        (
            Edit(
                "properties/sdk/machine.py",
                "    if isinstance(exc, ops.InvalidInput):\n",
                "    if isinstance(exc, (ops.InvalidInput, AdapterError)):\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_no_microseconds",
        (
            "the state machine's clock carries no microseconds (nor does conformance's): an SDK with a"
            " millisecond clock type passes"
        ),
        "§2",
        (
            Edit(
                "properties/sdk/machine.py",
                "        self.now += timedelta(microseconds=123457)\n",
                "",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_results_compared_by_type",
        (
            "the state machine compares results by type only: a wrong value no table shows (a woken"
            " list, a claimed row) passes"
        ),
        "§sdk-adapter What the state machine does",
        (
            Edit(
                "properties/sdk/machine.py",
                "        if expected != actual:\n            detail = (",
                "        if type(expected) is not type(actual):\n            detail = (",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_program_not_cleared",
        (
            "the printed program is not restarted per example: the report's 'shortest program' holds"
            " every example's requests"
        ),
        "§sdk-adapter What the state machine does (the shortest program)",
        (
            Edit(
                "properties/sdk/machine.py",
                "        PROGRAM.clear()\n        super().__init__()\n",
                "        super().__init__()\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_program_appended_after_reply",
        (
            "the printed program records a request after its reply: the request an adapter crashed or"
            " timed out on is missing from it"
        ),
        "§sdk-adapter What the state machine does (the shortest program)",
        (
            Edit(
                "properties/sdk/machine.py",
                (
                    "        PROGRAM.append(encode_op(op))\n"
                    "        before = self.model.state\n"
                    "        expected = _outcome(lambda: self.model.apply(op))\n"
                    "        actual = _outcome(lambda: store.apply(op))\n"
                ),
                (
                    "        before = self.model.state\n"
                    "        expected = _outcome(lambda: self.model.apply(op))\n"
                    "        actual = _outcome(lambda: store.apply(op))\n"
                    "        PROGRAM.append(encode_op(op))\n"
                ),
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_tx_results_unchecked",
        "a transactional enqueue's result is compared by type only: wrong ids pass",
        "§5.1",
        (
            Edit(
                "properties/sdk/machine.py",
                ('        if expected != actual:\n            raise Divergence(f"transactional Enqueue results differ'),
                (
                    "        if type(expected) is not type(actual):\n"
                    '            raise Divergence(f"transactional Enqueue results differ'
                ),
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_unscheduled_first_nulls_the_older",
        (
            "the NULLS FIRST scenario nulls the older job's ready_at: NULLS FIRST then claims the job"
            " that an SDK ordering by (priority, id) alone, ignoring ready_at, claims too"
        ),
        "§6",
        (
            Edit(
                "properties/sdk/machine.py",
                "        later = max(result.ids)\n",
                "        later = min(result.ids)\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_first_difference_model_keys_only",
        (
            "the report's first differing row looks at the model's rows only: a row only the database"
            " has is reported as '(no row differs)'"
        ),
        "§sdk-adapter What the state machine does (the first differing row)",
        (
            Edit(
                "properties/sdk/machine.py",
                "    for key in sorted(set(mine) | set(theirs), key=repr):\n",
                "    for key in sorted(set(mine), key=repr):\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_no_restart_between_cases",
        ("conformance does not restart an adapter a finding killed: every later case fails as 'not running'"),
        "§sdk-adapter Errors (after a finding the harness restarts the adapter)",
        (
            Edit(
                "properties/sdk/conformance.py",
                "                adapter.ensure()\n                reset(harness)\n",
                "                reset(harness)\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_machine_overwrites_ok",
        "the command line's status is the state machine's alone: a conformance failure exits 0",
        "§sdk-adapter (exit status)",
        (
            Edit(
                "properties/sdk/__main__.py",
                "                ok = ok and machine.ok\n",
                "                ok = machine.ok\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_replay_exit_zero",
        "--replay exits 0 whatever the replay found",
        "§sdk-adapter (exit status)",
        (
            Edit(
                "properties/sdk/__main__.py",
                "                return 0 if error is None else 1\n",
                "                return 0\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
    Mutant(
        "sdkjudge_cli_timeout_ignored",
        "--timeout is ignored (the 20 s default applies)",
        "§sdk-adapter Transport (timeout)",
        (
            Edit(
                "properties/sdk/__main__.py",
                ("        adapter = AdapterProcess(args.adapter, url, schema=args.schema, timeout=args.timeout)\n"),
                "        adapter = AdapterProcess(args.adapter, url, schema=args.schema)\n",
            ),
        ),
        suite=SDK_JUDGE_SUITE,
    ),
)
