// Command upstreamgo drives the upstream Go client (github.com/cornelmarck/durable-execution/clients/go)
// against a running `belay serve`: every exported method of *client.Client at least once, each answer
// checked for what the OpenAPI means. tests/upstream/test_upstream_go.py builds it with a `replace`
// pointing at $BELAY_UPSTREAM and runs it; the upstream code is never copied here.
//
//	upstreamgo BASE_URL ANSWERS_LOG
//
// Every HTTP answer the client receives is appended to ANSWERS_LOG as a JSON line
// {method, path, status, body}; the Python side validates those against the OpenAPI document.
// Exit status 0 when every check held; otherwise each failed check is printed as "FAIL ...".
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/cornelmarck/durable-execution/api/v1"
	client "github.com/cornelmarck/durable-execution/clients/go"
)

var (
	failures int
	called   = map[string]bool{}
)

func check(ok bool, format string, args ...any) {
	if !ok {
		failures++
		fmt.Printf("FAIL "+format+"\n", args...)
	}
}

// must stops the run on an unexpected error, naming the line of the call.
func must[T any](v T, err error) T {
	if err != nil {
		_, _, line, _ := runtime.Caller(1)
		fmt.Printf("FAIL main.go:%d: %v\n", line, err)
		os.Exit(1)
	}
	return v
}

// routes names the client method behind each request (every method sends exactly one).
var routes = []struct {
	method, pattern, name string
}{
	{"POST", `^/api/v1/queues$`, "CreateQueue"},
	{"GET", `^/api/v1/queues$`, "ListQueues"},
	{"DELETE", `^/api/v1/queues/[^/]+$`, "DeleteQueue"},
	{"GET", `^/api/v1/queues/[^/]+/stats$`, "GetQueueStats"},
	{"POST", `^/api/v1/queues/[^/]+/tasks$`, "CreateTask"},
	{"POST", `^/api/v1/queues/[^/]+/tasks/claim$`, "ClaimTasks"},
	{"GET", `^/api/v1/tasks$`, "ListTasks"},
	{"GET", `^/api/v1/runs$`, "ListRuns"},
	{"POST", `^/api/v1/runs/[^/]+/complete$`, "CompleteRun"},
	{"POST", `^/api/v1/runs/[^/]+/fail$`, "FailRun"},
	{"POST", `^/api/v1/runs/[^/]+/schedule$`, "ScheduleRun"},
	{"POST", `^/api/v1/runs/[^/]+/wait-for-event$`, "WaitForEvent"},
	{"PUT", `^/api/v1/tasks/[^/]+/checkpoints/[^/]+$`, "SetCheckpoint"},
	{"GET", `^/api/v1/tasks/[^/]+/checkpoints/[^/]+$`, "GetCheckpoint"},
	{"POST", `^/api/v1/events$`, "EmitEvent"},
	{"POST", `^/api/v1/workflow-runs$`, "CreateWorkflowRun"},
	{"PATCH", `^/api/v1/workflow-runs/[^/]+$`, "UpdateWorkflowRun"},
}

// status returns the HTTP status of an API error (0 when none).
func status(method string, err error) int {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		check(apiErr.Error() != "", "%s: an empty error message", method)
		return apiErr.StatusCode
	}
	check(err == nil, "%s: not an API error: %v", method, err)
	return 0
}

type logged struct {
	mu   sync.Mutex
	file *os.File
	next http.RoundTripper
}

func (l *logged) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	line, _ := json.Marshal(map[string]any{
		"method": req.Method, "path": req.URL.EscapedPath(), "status": resp.StatusCode, "body": string(body),
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range routes {
		if r.method == req.Method && regexp.MustCompile(r.pattern).MatchString(req.URL.EscapedPath()) {
			called[r.name] = true
		}
	}
	l.file.Write(append(line, '\n'))
	return resp, nil
}

func ptr[T any](v T) *T { return &v }

func claimOne(ctx context.Context, c *client.Client, queue string, timeout int32) apiv1.ClaimedTask {
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := must(c.ClaimTasks(ctx, queue, apiv1.ClaimTasksRequest{Limit: 1, ClaimTimeout: timeout}))
		if len(got.Tasks) == 1 {
			return got.Tasks[0]
		}
		check(len(got.Tasks) == 0, "ClaimTasks limit 1 handed out %d", len(got.Tasks))
		if time.Now().After(deadline) {
			fmt.Printf("FAIL nothing became claimable in %s\n", queue)
			os.Exit(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runsOf(ctx context.Context, c *client.Client, taskID string) []string {
	got := must(c.ListRuns(ctx, &taskID, nil, nil, 0))
	out := []string{}
	for _, r := range got.Runs {
		check(r.TaskID == taskID, "ListRuns task_id filter: %s", r.TaskID)
		e := ""
		if r.Error != nil {
			e = ":" + *r.Error
		}
		out = append(out, fmt.Sprintf("%d:%s%s", r.Attempt, r.Status, e))
	}
	return out
}

func eq(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func main() {
	if len(os.Args) != 3 {
		fmt.Println("usage: upstreamgo BASE_URL ANSWERS_LOG")
		os.Exit(2)
	}
	logFile, err := os.Create(os.Args[2])
	if err != nil {
		panic(err)
	}
	defer logFile.Close()
	c := client.New(os.Args[1] + "/")
	check(c.BaseURL == os.Args[1], "New trims the trailing slash: %q", c.BaseURL)
	c.HTTPClient = &http.Client{Transport: &logged{file: logFile, next: http.DefaultTransport}, Timeout: 60 * time.Second}
	ctx := context.Background()
	started := time.Now()

	// queues
	q := must(c.CreateQueue(ctx, apiv1.CreateQueueRequest{Name: "go", Cleanup: &apiv1.CleanupPolicy{TaskTTLSeconds: ptr(int32(60))}}))
	check(q.Name == "go" && !q.CreatedAt.IsZero() && q.Cleanup != nil && *q.Cleanup.TaskTTLSeconds == 60, "CreateQueue: %+v", q)
	_, err = c.CreateQueue(ctx, apiv1.CreateQueueRequest{Name: "go"})
	check(status("CreateQueue", err) == 409, "CreateQueue duplicate: %v", err)
	must(c.CreateQueue(ctx, apiv1.CreateQueueRequest{Name: "other"}))
	qs := must(c.ListQueues(ctx))
	names := []string{}
	for _, s := range qs.Queues {
		check(!s.CreatedAt.IsZero(), "ListQueues created_at")
		names = append(names, s.Name)
	}
	sort.Strings(names)
	check(eq(names, []string{"go", "other"}), "ListQueues: %v", names)
	st := must(c.GetQueueStats(ctx, "go"))
	check(st.QueueName == "go" && st.PendingRuns == 0 && st.ClaimedRuns == 0 && st.CompletedRuns == 0 && st.OldestPendingAgeSeconds == nil, "GetQueueStats empty: %+v", st)
	_, err = c.GetQueueStats(ctx, "nope")
	check(status("GetQueueStats", err) == 404, "GetQueueStats missing: %v", err)

	// a workflow run and a task in it
	wf := must(c.CreateWorkflowRun(ctx, apiv1.CreateWorkflowRunRequest{
		WorkflowName: "pipeline", WorkflowVersion: ptr("1"), Inputs: json.RawMessage(`{"a":1}`), CreatedBy: ptr("go"), Tags: map[string]string{"k": "v"},
	}))
	check(wf.WorkflowName == "pipeline" && wf.Status == "pending" && wf.WorkflowRunID != "" && !wf.CreatedAt.IsZero(), "CreateWorkflowRun: %+v", wf)
	running := apiv1.WorkflowRunStatus("running")
	up := must(c.UpdateWorkflowRun(ctx, wf.WorkflowRunID, apiv1.UpdateWorkflowRunRequest{Status: &running, StartedAt: ptr(time.Now())}))
	check(up.WorkflowRunID == wf.WorkflowRunID && up.Status == "running" && !up.UpdatedAt.IsZero(), "UpdateWorkflowRun: %+v", up)
	_, err = c.UpdateWorkflowRun(ctx, "wfr_nope", apiv1.UpdateWorkflowRunRequest{Status: &running})
	check(status("UpdateWorkflowRun", err) == 404, "UpdateWorkflowRun missing: %v", err)

	created := must(c.CreateTask(ctx, "go", apiv1.CreateTaskRequest{
		TaskName: "work", Params: json.RawMessage(`{"n":1}`), Headers: map[string]string{"h": "v"},
		RetryStrategy: &apiv1.RetryStrategy{Kind: "fixed", BaseSeconds: 0}, MaxAttempts: ptr(int32(2)),
		StartTimeout: ptr(int32(0)), ExecutionTimeout: ptr(int32(3600)), WorkflowRunID: &wf.WorkflowRunID,
	}))
	check(created.TaskID != "" && created.RunID != "" && created.WorkflowRunID != nil && *created.WorkflowRunID == wf.WorkflowRunID, "CreateTask: %+v", created)
	must(c.CreateTask(ctx, "other", apiv1.CreateTaskRequest{TaskName: "elsewhere"}))
	_, err = c.CreateTask(ctx, "go", apiv1.CreateTaskRequest{TaskName: "x", MaxAttempts: ptr(int32(0))})
	check(status("CreateTask", err) == 400, "CreateTask max_attempts 0: %v", err)

	tl := must(c.ListTasks(ctx, ptr("go"), nil, ptr("work"), nil, 0))
	check(len(tl.Tasks) == 1 && tl.Tasks[0].ID == created.TaskID && tl.Tasks[0].Status == "pending" && tl.Tasks[0].QueueName == "go" &&
		tl.Tasks[0].TaskName == "work" && tl.Tasks[0].MaxAttempts == 2 && tl.Tasks[0].CompletedAt == nil && tl.Tasks[0].CreatedAt != "", "ListTasks by queue and name: %+v", tl.Tasks)
	tl = must(c.ListTasks(ctx, ptr("go"), nil, ptr("elsewhere"), nil, 0))
	check(len(tl.Tasks) == 0, "ListTasks task_name filter: %+v", tl.Tasks)
	tl = must(c.ListTasks(ctx, nil, nil, nil, nil, 0))
	check(len(tl.Tasks) == 2, "ListTasks without filters: %+v", tl.Tasks)
	clientStatus := map[apiv1.TaskStatus]bool{apiv1.TaskStatusPending: true, apiv1.TaskStatusCompleted: true, apiv1.TaskStatusFailed: true, apiv1.TaskStatusCanceled: true}
	check(eq(runsOf(ctx, c, created.TaskID), []string{"1:pending"}), "runs after create: %v", runsOf(ctx, c, created.TaskID))

	// the first run: claimed, a checkpoint, failed -> a retry
	first := claimOne(ctx, c, "go", 30)
	check(first.RunID == created.RunID && first.TaskID == created.TaskID && first.Attempt == 1 && first.MaxAttempts == 2 && first.TaskName == "work", "ClaimTasks: %+v", first)
	check(string(first.Params) == `{"n":1}` || strings.ReplaceAll(string(first.Params), " ", "") == `{"n":1}`, "ClaimTasks params: %s", first.Params)
	check(first.Headers["h"] == "v" && first.RetryStrategy != nil && first.RetryStrategy.Kind == "fixed", "ClaimTasks headers/retry: %+v", first)
	st = must(c.GetQueueStats(ctx, "go"))
	check(st.ClaimedRuns == 1 && st.PendingRuns == 0, "GetQueueStats claimed: %+v", st)
	tl = must(c.ListTasks(ctx, ptr("go"), ptr(string(apiv1.TaskStatusPending)), nil, nil, 0))
	check(len(tl.Tasks) == 1 && tl.Tasks[0].Status == apiv1.TaskStatusPending, "a claimed task is pending in TaskStatus: %+v", tl.Tasks)
	_, err = c.GetCheckpoint(ctx, created.TaskID, "progress")
	check(status("GetCheckpoint", err) == 404, "GetCheckpoint before any: %v", err)
	cp := must(c.SetCheckpoint(ctx, created.TaskID, "progress", apiv1.SetCheckpointRequest{State: json.RawMessage(`{"done":1}`), OwnerRun: first.RunID, ExtendClaimBy: ptr(int32(30))}))
	check(cp.TaskID == created.TaskID && cp.StepName == "progress" && !cp.UpdatedAt.IsZero(), "SetCheckpoint: %+v", cp)
	got := must(c.GetCheckpoint(ctx, created.TaskID, "progress"))
	var state map[string]int
	check(json.Unmarshal(got.State, &state) == nil && state["done"] == 1 && got.StepName == "progress", "GetCheckpoint: %s", got.State)
	failed := must(c.FailRun(ctx, first.RunID, apiv1.FailRunRequest{Error: "boom"}))
	check(failed.RunID == first.RunID && failed.Status == "failed" && failed.Attempt == 1 && failed.NextRunID != nil && failed.NextAttemptAt != nil, "FailRun: %+v", failed)
	_, err = c.FailRun(ctx, first.RunID, apiv1.FailRunRequest{Error: "again"})
	check(status("FailRun", err) == 409, "FailRun twice: %v", err)

	second := claimOne(ctx, c, "go", 30)
	check(failed.NextRunID != nil && second.RunID == *failed.NextRunID && second.Attempt == 2 && second.MaxAttempts == 2, "retry claim: %+v", second)
	_, err = c.SetCheckpoint(ctx, created.TaskID, "progress", apiv1.SetCheckpointRequest{State: json.RawMessage(`1`), OwnerRun: first.RunID})
	check(status("SetCheckpoint", err) == 409, "SetCheckpoint by a stale run: %v", err)
	_, err = c.CompleteRun(ctx, first.RunID, apiv1.CompleteRunRequest{Result: json.RawMessage(`1`)})
	check(status("CompleteRun", err) == 409, "CompleteRun by a stale run: %v", err)
	done := must(c.CompleteRun(ctx, second.RunID, apiv1.CompleteRunRequest{Result: json.RawMessage(`{"ok":true}`)}))
	check(done.RunID == second.RunID && done.Status == "completed", "CompleteRun: %+v", done)
	check(eq(runsOf(ctx, c, created.TaskID), []string{"1:failed:boom", "2:completed"}), "runs after retry: %v", runsOf(ctx, c, created.TaskID))
	tl = must(c.ListTasks(ctx, ptr("go"), ptr("completed"), nil, nil, 0))
	check(len(tl.Tasks) == 1 && tl.Tasks[0].ID == created.TaskID && tl.Tasks[0].CompletedAt != nil, "ListTasks completed: %+v", tl.Tasks)
	completed := apiv1.WorkflowRunStatus("completed")
	up = must(c.UpdateWorkflowRun(ctx, wf.WorkflowRunID, apiv1.UpdateWorkflowRunRequest{Status: &completed, Result: json.RawMessage(`{"r":1}`), CompletedAt: ptr(time.Now())}))
	check(up.Status == "completed", "UpdateWorkflowRun completed: %+v", up)

	// schedule: Go sends run_at with nanoseconds; the same run comes back under the returned id
	must(c.CreateTask(ctx, "go", apiv1.CreateTaskRequest{TaskName: "later"}))
	held := claimOne(ctx, c, "go", 30)
	runAt := time.Now().Add(time.Second)
	sched := must(c.ScheduleRun(ctx, held.RunID, apiv1.ScheduleRunRequest{RunAt: runAt}))
	check(sched.RunID != "" && sched.ScheduledAt.Sub(runAt).Abs() < time.Second, "ScheduleRun: %+v (asked %v)", sched, runAt)
	sleeping := must(c.ListRuns(ctx, &held.TaskID, ptr("sleeping"), nil, 0))
	check(len(sleeping.Runs) == 1 && sleeping.Runs[0].ID == sched.RunID, "ListRuns sleeping after schedule: %+v", sleeping.Runs)
	none := must(c.ClaimTasks(ctx, "go", apiv1.ClaimTasksRequest{Limit: 5, ClaimTimeout: 30}))
	check(len(none.Tasks) == 0, "a scheduled run claimable early: %+v", none.Tasks)
	back := claimOne(ctx, c, "go", 30)
	check(back.TaskID == held.TaskID && back.RunID == sched.RunID && back.Attempt == 1 && back.MaxAttempts == 1, "scheduled run back: %+v", back)
	must(c.CompleteRun(ctx, back.RunID, apiv1.CompleteRunRequest{}))

	// wait-for-event: 202 sleeping, the event wakes the run, the wait then resolves
	must(c.CreateTask(ctx, "go", apiv1.CreateTaskRequest{TaskName: "waiter"}))
	w := claimOne(ctx, c, "go", 30)
	wait := apiv1.WaitForEventRequest{EventName: "go-event", TimeoutSeconds: 60, TaskID: w.TaskID, StepName: "s"}
	slept := must(c.WaitForEvent(ctx, w.RunID, wait))
	check(slept.Status == "sleeping" && slept.Message != "", "WaitForEvent 202: %+v", slept)
	tl = must(c.ListTasks(ctx, ptr("go"), nil, ptr("waiter"), nil, 0))
	check(len(tl.Tasks) == 1 && tl.Tasks[0].Status == apiv1.TaskStatusPending, "a waiting task is pending in TaskStatus: %+v", tl.Tasks)
	for _, tk := range must(c.ListTasks(ctx, nil, nil, nil, nil, 100)).Tasks {
		check(clientStatus[tk.Status], "a status outside the client's TaskStatus: %+v", tk)
	}
	ev := must(c.EmitEvent(ctx, apiv1.EmitEventRequest{EventName: "go-event", Payload: json.RawMessage(`{"v":7}`)}))
	check(ev.EventID != "" && ev.EventName == "go-event" && !ev.CreatedAt.IsZero(), "EmitEvent: %+v", ev)
	woken := claimOne(ctx, c, "go", 30)
	check(woken.TaskID == w.TaskID && woken.Attempt == 1 && woken.MaxAttempts == 1, "woken: %+v", woken)
	resolved := must(c.WaitForEvent(ctx, woken.RunID, wait))
	check(resolved.Status == "resolved" && strings.ReplaceAll(string(resolved.Payload), " ", "") == `{"v":7}`, "WaitForEvent resolved: %+v", resolved)
	must(c.CompleteRun(ctx, woken.RunID, apiv1.CompleteRunRequest{Result: json.RawMessage(`"ok"`)}))
	check(eq(runsOf(ctx, c, w.TaskID), []string{"1:completed"}), "runs after wait: %v", runsOf(ctx, c, w.TaskID))

	// a timed-out wait: 408, which the client returns as an error
	must(c.CreateTask(ctx, "go", apiv1.CreateTaskRequest{TaskName: "times-out"}))
	t := claimOne(ctx, c, "go", 30)
	short := apiv1.WaitForEventRequest{EventName: "never", TimeoutSeconds: 1, TaskID: t.TaskID, StepName: "s"}
	check(must(c.WaitForEvent(ctx, t.RunID, short)).Status == "sleeping", "short wait not sleeping")
	again := claimOne(ctx, c, "go", 30)
	_, err = c.WaitForEvent(ctx, again.RunID, short)
	check(status("WaitForEvent", err) == 408, "WaitForEvent after the deadline: %v", err)
	sl := must(c.ListRuns(ctx, nil, ptr("sleeping"), nil, 0))
	check(len(sl.Runs) == 0, "runs left sleeping: %+v", sl.Runs)
	must(c.FailRun(ctx, again.RunID, apiv1.FailRunRequest{Error: "timeout"}))

	// an expired claim: claimable again, max_attempts (1) intact, the stale holder refused
	exp := must(c.CreateTask(ctx, "go", apiv1.CreateTaskRequest{TaskName: "slow"}))
	gone := claimOne(ctx, c, "go", 1)
	re := claimOne(ctx, c, "go", 30)
	check(re.TaskID == exp.TaskID && re.Attempt == 1 && re.MaxAttempts == 1, "re-claimed: %+v", re)
	_, err = c.CompleteRun(ctx, gone.RunID, apiv1.CompleteRunRequest{})
	check(status("CompleteRun", err) == 409, "CompleteRun after expiry: %v", err)
	_, err = c.ScheduleRun(ctx, gone.RunID, apiv1.ScheduleRunRequest{RunAt: time.Now()})
	check(status("ScheduleRun", err) == 409, "ScheduleRun after expiry: %v", err)
	_, err = c.WaitForEvent(ctx, gone.RunID, apiv1.WaitForEventRequest{EventName: "e", TimeoutSeconds: 5, TaskID: exp.TaskID, StepName: "s"})
	check(status("WaitForEvent", err) == 409, "WaitForEvent after expiry: %v", err)
	must(c.CompleteRun(ctx, re.RunID, apiv1.CompleteRunRequest{}))
	check(eq(runsOf(ctx, c, exp.TaskID), []string{"1:completed"}), "runs after expiry: %v", runsOf(ctx, c, exp.TaskID))

	// paging with the cursor: no skip, no repeat
	seen := map[string]int{}
	var cursor *string
	for pages := 0; pages < 20; pages++ {
		page := must(c.ListRuns(ctx, nil, nil, cursor, 2))
		check(len(page.Runs) <= 2, "ListRuns limit 2: %d", len(page.Runs))
		for _, r := range page.Runs {
			seen[r.ID]++
		}
		if page.NextCursor == nil {
			break
		}
		cursor = page.NextCursor
	}
	all := must(c.ListRuns(ctx, nil, nil, nil, 100))
	check(len(seen) == len(all.Runs), "paged %d runs, listed %d", len(seen), len(all.Runs))
	for id, n := range seen {
		check(n == 1, "run %s paged %d times", id, n)
	}
	taskSeen := map[string]int{}
	cursor = nil
	for pages := 0; pages < 20; pages++ {
		page := must(c.ListTasks(ctx, ptr("go"), nil, nil, cursor, 2))
		for _, tk := range page.Tasks {
			taskSeen[tk.ID]++
		}
		if page.NextCursor == nil {
			break
		}
		cursor = page.NextCursor
	}
	check(len(taskSeen) == 5, "ListTasks paged %d tasks of 5", len(taskSeen))

	// a long poll returns when a task arrives
	go func() {
		time.Sleep(500 * time.Millisecond)
		must(c.CreateTask(ctx, "other", apiv1.CreateTaskRequest{TaskName: "late"}))
	}()
	polled := time.Now()
	lp := must(c.ClaimTasks(ctx, "go", apiv1.ClaimTasksRequest{Limit: 1, ClaimTimeout: 30, LongPollSeconds: ptr(int32(5))}))
	check(len(lp.Tasks) == 0, "long poll on an empty queue handed out %d", len(lp.Tasks))
	check(time.Since(polled) > 4*time.Second, "long poll on an empty queue returned after %v", time.Since(polled))
	lp = must(c.ClaimTasks(ctx, "other", apiv1.ClaimTasksRequest{Limit: 5, ClaimTimeout: 30, LongPollSeconds: ptr(int32(5))}))
	check(len(lp.Tasks) == 2, "ClaimTasks other: %d", len(lp.Tasks))

	// delete: 409 while unfinished, 204 once only finished tasks remain, then 404
	check(status("DeleteQueue", c.DeleteQueue(ctx, "other")) == 409, "DeleteQueue with claimed tasks")
	check(status("DeleteQueue", c.DeleteQueue(ctx, "go")) == 0, "DeleteQueue of finished tasks")
	check(status("DeleteQueue", c.DeleteQueue(ctx, "go")) == 404, "DeleteQueue twice")
	qs = must(c.ListQueues(ctx))
	check(len(qs.Queues) == 1 && qs.Queues[0].Name == "other", "ListQueues after delete: %+v", qs.Queues)

	typ := reflect.TypeOf(c)
	for i := 0; i < typ.NumMethod(); i++ {
		check(called[typ.Method(i).Name], "method %s never called", typ.Method(i).Name)
	}
	fmt.Printf("methods %d called %d, %.1fs\n", typ.NumMethod(), len(called), time.Since(started).Seconds())
	if failures > 0 {
		fmt.Printf("%d checks failed\n", failures)
		os.Exit(1)
	}
	fmt.Println("ok")
}
