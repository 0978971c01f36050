package crashtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

const envRole = "CRASHTEST_CHILD"

// TestMain runs the child roles of TestRun and checks for leaks.
func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(child(role))
	}
	goleak.VerifyTestMain(m)
}

// child is a helper process of TestRun.
func child(role string) int {
	ch, err := crashtest.ChildFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rep := crashtest.NewReporter(os.Stdout)
	hook := crashtest.NewHook(ch.Plan, rep, nil)
	switch role {
	case "work":
		// Acknowledge, hit points, acknowledge, finish.
		rep.Ack("t 1", fmt.Sprintf("cp-%d", ch.Gen))
		hook.Hit(string(crashtest.AfterNode))
		rep.EffectAck("k1")
		hook.Hit(string(crashtest.AfterNode))
		rep.Decided("a1", "approved")
		hook.Hit(string(crashtest.AfterDecision))
		rep.Hits(hook.Hits())
		rep.Done()
		return 0
	case "fail":
		fmt.Fprintln(os.Stderr, "something broke")
		return 3
	case "sleep":
		rep.Ack("t", "cp")
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

func spawn(role string, plan crashtest.Plan) crashtest.Spawn {
	return crashtest.Spawn{Env: []string{envRole + "=" + role}, Plan: plan, Gen: 7}
}

func TestRun(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		s        crashtest.Spawn
		wantErr  error
		want     crashtest.Output
		killed   bool
		byParent bool
		at       string
	}{
		{
			name: "clean exit",
			s:    spawn("work", crashtest.Plan{}),
			want: crashtest.Output{
				Checkpoints: []crashtest.CheckpointAck{{Thread: "t 1", ID: "cp-7"}},
				Effects:     []string{"k1"},
				Decisions:   []crashtest.DecisionAck{{ID: "a1", Outcome: "approved"}},
				Hits:        map[crashtest.Point]int{crashtest.AfterNode: 2, crashtest.AfterDecision: 1},
				Done:        true,
			},
		},
		{
			name:   "killed at the second hit",
			s:      spawn("work", crashtest.Plan{Point: crashtest.AfterNode, Occurrence: 2}),
			killed: true,
			at:     "graph.afterTask@2",
			want: crashtest.Output{
				Checkpoints: []crashtest.CheckpointAck{{Thread: "t 1", ID: "cp-7"}},
				Effects:     []string{"k1"},
				Kill:        &crashtest.KillAck{Point: crashtest.AfterNode, Occurrence: 2},
			},
		},
		{
			name: "a point not hit that often",
			s:    spawn("work", crashtest.Plan{Point: crashtest.AfterDecision, Occurrence: 2}),
			want: crashtest.Output{
				Checkpoints: []crashtest.CheckpointAck{{Thread: "t 1", ID: "cp-7"}},
				Effects:     []string{"k1"},
				Decisions:   []crashtest.DecisionAck{{ID: "a1", Outcome: "approved"}},
				Hits:        map[crashtest.Point]int{crashtest.AfterNode: 2, crashtest.AfterDecision: 1},
				Done:        true,
			},
		},
		{
			// What the child said before the delay ran out depends on how
			// fast it started: only the way it ended is compared.
			name:     "killed by the parent after a delay",
			s:        spawn("sleep", crashtest.Plan{Delay: 300 * time.Millisecond}),
			killed:   true,
			byParent: true,
			at:       "delay=300ms",
		},
		{
			name:    "failed child",
			s:       spawn("fail", crashtest.Plan{}),
			wantErr: crashtest.ErrChildFailed,
		},
		{
			name:    "hung child",
			s:       crashtest.Spawn{Env: []string{envRole + "=sleep"}, Timeout: 300 * time.Millisecond},
			wantErr: crashtest.ErrHung,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := crashtest.Run(ctx, tc.s)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				var ce *crashtest.ChildError
				if !errors.As(err, &ce) || res == nil {
					t.Fatalf("Run: %v (%T), result %v", err, err, res)
				}
				if tc.wantErr == crashtest.ErrChildFailed && !strings.Contains(ce.Stderr, "something broke") {
					t.Errorf("the error lacks the child's stderr: %q", ce.Stderr)
				}
				return
			}
			if tc.byParent {
				res.Output = crashtest.Output{}
			}
			if diff := cmp.Diff(tc.want, res.Output); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if res.Killed != tc.killed || res.ByParent != tc.byParent || res.KilledAt() != tc.at || res.Gen != 7 {
				t.Errorf("killed %v by parent %v at %q gen %d, want %v %v %q 7", res.Killed, res.ByParent, res.KilledAt(), res.Gen, tc.killed, tc.byParent, tc.at)
			}
		})
	}
}

func TestRunRefusesBadPlan(t *testing.T) {
	_, err := crashtest.Run(t.Context(), spawn("work", crashtest.Plan{Point: "nowhere", Occurrence: 1}))
	if !errors.Is(err, crashtest.ErrInvalidPlan) {
		t.Fatalf("Run: %v, want ErrInvalidPlan", err)
	}
}

// The points' names are the engine's: every engine point of Points is hit
// by a real run on the SQLite saver, under the name the harness uses.
func TestPointsAreTheEngines(t *testing.T) {
	for got, want := range map[crashtest.Point]string{
		crashtest.AfterNode:  testhook.GraphAfterTask,
		crashtest.BeforeSave: testhook.GraphBeforeSave,
		crashtest.AfterSave:  testhook.GraphAfterSave,
	} {
		if string(got) != want {
			t.Errorf("point %q, the engine says %q", got, want)
		}
	}
	var (
		mu  sync.Mutex
		hit = map[string]bool{}
	)
	record := func(p string) { mu.Lock(); hit[p] = true; mu.Unlock() }
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "p.db"), sqlite.Config{Hook: record})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type st struct {
		Log []string `lockstep:"append"`
	}
	node := func(name string, wait time.Duration) graph.NodeFunc[st] {
		return func(ctx context.Context, _ st) (graph.Update[st], error) {
			time.Sleep(wait) // the fast branch's writes are saved while the slow one runs
			return graph.Set(st{Log: []string{name}}, "Log"), nil
		}
	}
	r, err := graph.New[st]().AddNode("fast", node("fast", 0)).AddNode("slow", node("slow", 50*time.Millisecond)).
		AddEdge(graph.START, "fast").AddEdge(graph.START, "slow").
		Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(testhook.With(t.Context(), record), "t", graph.Update[st]{}); err != nil {
		t.Fatal(err)
	}
	for _, pi := range crashtest.Points() {
		if pi.Engine && !hit[string(pi.Point)] {
			t.Errorf("engine point %s was not hit by a run (hit: %v)", pi.Point, hit)
		}
		if !pi.Engine && hit[string(pi.Point)] {
			t.Errorf("scenario point %s was hit by the engine", pi.Point)
		}
	}
}

func TestPlanText(t *testing.T) {
	for _, tc := range []struct {
		text string
		plan crashtest.Plan
		bad  bool
	}{
		{text: "none", plan: crashtest.Plan{}},
		{text: "sqlite.put.begin@3", plan: crashtest.Plan{Point: crashtest.PutBegin, Occurrence: 3}},
		{text: "delay=15ms", plan: crashtest.Plan{Delay: 15 * time.Millisecond}},
		{text: "crashtest.afterClaim@1", plan: crashtest.Plan{Point: crashtest.AfterClaim, Occurrence: 1}},
		{text: "nowhere@1", bad: true},
		{text: "sqlite.put.begin@0", bad: true},
		{text: "sqlite.put.begin", bad: true},
		{text: "delay=-1s", bad: true},
		{text: "delay=soon", bad: true},
	} {
		got, err := crashtest.ParsePlan(tc.text)
		if tc.bad {
			if !errors.Is(err, crashtest.ErrInvalidPlan) {
				t.Errorf("ParsePlan(%q) = %v, %v; want ErrInvalidPlan", tc.text, got, err)
			}
			continue
		}
		if err != nil || got != tc.plan {
			t.Errorf("ParsePlan(%q) = %v, %v; want %v", tc.text, got, err, tc.plan)
		}
		if s := tc.plan.String(); s != tc.text {
			t.Errorf("%#v.String() = %q, want %q", tc.plan, s, tc.text)
		}
	}
	if err := (crashtest.Plan{Point: crashtest.PutBegin, Occurrence: 1, Delay: time.Second}).Validate(); !errors.Is(err, crashtest.ErrInvalidPlan) {
		t.Errorf("a point and a delay: %v", err)
	}
}

func TestPlanSpaceDraw(t *testing.T) {
	ps := crashtest.PlanSpace{
		Points:        []crashtest.Point{crashtest.PutBegin, crashtest.AfterNode},
		MaxOccurrence: map[crashtest.Point]int{crashtest.PutBegin: 3},
		DelayShare:    0.25,
		MinDelay:      time.Millisecond,
		MaxDelay:      5 * time.Millisecond,
	}
	draw := func(seed uint64) []crashtest.Plan {
		r := rand.New(rand.NewPCG(seed, 0))
		var out []crashtest.Plan
		for range 400 {
			p, err := ps.Draw(r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	a, b := draw(9), draw(9)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("the same seed drew other plans:\n%s", diff)
	}
	delays := 0
	for _, p := range a {
		switch {
		case p.Delay > 0:
			delays++
			if p.Delay < ps.MinDelay || p.Delay >= ps.MaxDelay {
				t.Errorf("delay %v out of range", p.Delay)
			}
		case p.Point == crashtest.PutBegin && (p.Occurrence < 1 || p.Occurrence > 3),
			p.Point == crashtest.AfterNode && p.Occurrence != 1:
			t.Errorf("plan %s out of range", p)
		}
	}
	if delays < 50 || delays > 150 {
		t.Errorf("%d delays of 400, want about 100", delays)
	}
	if _, err := (crashtest.PlanSpace{}).Draw(rand.New(rand.NewPCG(1, 1))); !errors.Is(err, crashtest.ErrInvalidPlan) {
		t.Errorf("empty space: %v", err)
	}
}

func TestReporterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	r := crashtest.NewReporter(&buf)
	r.Ack("thread with spaces", "cp-1")
	r.Ack(`"quoted"`, "cp-2")
	r.TaskAck("t", "task-1")
	r.EffectAck("key\nwith newline")
	r.Decided("a1", "rejected")
	r.Kill(crashtest.PutBegin, 4)
	r.Hits(map[crashtest.Point]int{crashtest.PutBegin: 4, crashtest.AfterNode: 2})
	r.Done()
	buf.WriteString("a note\nACK cut-off")
	got, err := crashtest.ParseOutput(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := crashtest.Output{
		Checkpoints: []crashtest.CheckpointAck{{Thread: "thread with spaces", ID: "cp-1"}, {Thread: `"quoted"`, ID: "cp-2"}},
		Tasks:       []crashtest.TaskAck{{Thread: "t", Task: "task-1"}},
		Effects:     []string{"key\nwith newline"},
		Decisions:   []crashtest.DecisionAck{{ID: "a1", Outcome: "rejected"}},
		Kill:        &crashtest.KillAck{Point: crashtest.PutBegin, Occurrence: 4},
		Hits:        map[crashtest.Point]int{crashtest.PutBegin: 4, crashtest.AfterNode: 2},
		Done:        true,
		Notes:       []string{"a note"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"ACK one\n", "KILL p x\n", "ACK \"unterminated\n", "HITS a\n"} {
		if _, err := crashtest.ParseOutput([]byte(bad)); err == nil {
			t.Errorf("ParseOutput(%q) accepted a malformed line", bad)
		}
	}
}

func TestHook(t *testing.T) {
	var buf bytes.Buffer
	kills := 0
	h := crashtest.NewHook(crashtest.Plan{Point: crashtest.PutBegin, Occurrence: 2}, crashtest.NewReporter(&buf), func() { kills++ })
	for range 3 {
		h.Hit(string(crashtest.PutBegin))
		h.Hit(string(crashtest.AfterNode))
	}
	if kills != 1 {
		t.Errorf("killed %d times, want once", kills)
	}
	if diff := cmp.Diff(map[crashtest.Point]int{crashtest.PutBegin: 3, crashtest.AfterNode: 3}, h.Hits()); diff != "" {
		t.Errorf("hits (-want +got):\n%s", diff)
	}
	if got := buf.String(); got != "KILL sqlite.put.begin 2\n" {
		t.Errorf("reported %q", got)
	}
}

func TestWitness(t *testing.T) {
	path := filepath.Join(t.TempDir(), "witness")
	if es, err := crashtest.ReadWitness(path); err != nil || es != nil {
		t.Fatalf("missing file: %v, %v", es, err)
	}
	w, err := crashtest.OpenWitness(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Record("charge", "k1", "order-1"); err != nil {
		t.Fatal(err)
	}
	if err := w.Record("run", "task-1", ""); err != nil {
		t.Fatal(err)
	}
	if err := w.Record("charge", "k 2", ""); err == nil {
		t.Error("a key with a space was recorded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("charge torn") // a power loss cut the last line
	f.Close()
	got, err := crashtest.ReadWitness(path)
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	want := []crashtest.Effect{{Kind: "charge", Key: "k1", Subject: "order-1", Gen: 3, PID: pid}, {Kind: "run", Key: "task-1", Gen: 3, PID: pid}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// checks returns the checks vs violates, sorted, each once.
func checks(vs crashtest.Violations) []crashtest.CheckName {
	var out []crashtest.CheckName
	for _, v := range vs {
		if !slices.Contains(out, v.Check) {
			out = append(out, v.Check)
		}
	}
	slices.Sort(out)
	return out
}

func TestVerifyEffects(t *testing.T) {
	e := func(key, subject string, gen int) crashtest.Effect {
		return crashtest.Effect{Kind: "charge", Key: key, Subject: subject, Gen: gen}
	}
	ack := func(key string) crashtest.EffectAck { return crashtest.EffectAck{Key: key, Gen: 1} }
	for _, tc := range []struct {
		name    string
		effects []crashtest.Effect
		acked   []crashtest.EffectAck
		want    []crashtest.CheckName
	}{
		{"once and acknowledged", []crashtest.Effect{e("k1", "o1", 1), e("k2", "o2", 2)}, []crashtest.EffectAck{ack("k1"), ack("k1")}, nil},
		{"not acknowledged, not happened", nil, nil, nil},
		{"happened, not acknowledged (a crash in the window)", []crashtest.Effect{e("k1", "o1", 1)}, nil, nil},
		{"twice under one key", []crashtest.Effect{e("k1", "o1", 1), e("k1", "o1", 2)}, nil, []crashtest.CheckName{crashtest.CheckEffectOnce}},
		{"twice under two keys", []crashtest.Effect{e("k1", "o1", 1), e("k2", "o1", 2)}, nil, []crashtest.CheckName{crashtest.CheckEffectOnce}},
		{"same key, other kinds", []crashtest.Effect{e("k1", "", 1), {Kind: "mail", Key: "k9"}}, nil, nil},
		{"acknowledged, never happened", nil, []crashtest.EffectAck{ack("k1")}, []crashtest.CheckName{crashtest.CheckEffectAcked}},
		{"acknowledged, happened twice", []crashtest.Effect{e("k1", "", 1), e("k1", "", 1)}, []crashtest.EffectAck{ack("k1")},
			[]crashtest.CheckName{crashtest.CheckEffectAcked, crashtest.CheckEffectOnce}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := crashtest.VerifyEffects(tc.effects, tc.acked)
			if diff := cmp.Diff(tc.want, checks(vs)); diff != "" {
				t.Errorf("(-want +got):\n%s\n%v", diff, vs.Err())
			}
		})
	}
}

func TestVerifyDecisions(t *testing.T) {
	stored := map[string]string{"a1": "approved", "a2": "rejected"}
	lookup := func(ctx context.Context, id string) (string, bool, error) {
		if id == "broken" {
			return "", false, errors.New("disk on fire")
		}
		o, ok := stored[id]
		return o, ok, nil
	}
	d := func(id, outcome string) crashtest.DecisionAck { return crashtest.DecisionAck{ID: id, Outcome: outcome} }
	for _, tc := range []struct {
		name  string
		acked []crashtest.DecisionAck
		want  []crashtest.CheckName
	}{
		{"stored as acknowledged", []crashtest.DecisionAck{d("a1", "approved"), d("a2", "rejected")}, nil},
		{"decided twice", []crashtest.DecisionAck{d("a1", "approved"), d("a1", "approved")}, []crashtest.CheckName{crashtest.CheckDecision}},
		{"lost", []crashtest.DecisionAck{d("a3", "approved")}, []crashtest.CheckName{crashtest.CheckDecision}},
		{"stored otherwise", []crashtest.DecisionAck{d("a2", "approved")}, []crashtest.CheckName{crashtest.CheckDecision}},
		{"unreadable", []crashtest.DecisionAck{d("broken", "approved")}, []crashtest.CheckName{crashtest.CheckDecision}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := crashtest.VerifyDecisions(t.Context(), tc.acked, lookup)
			if diff := cmp.Diff(tc.want, checks(vs)); diff != "" {
				t.Errorf("(-want +got):\n%s\n%v", diff, vs.Err())
			}
		})
	}
}

func TestVerifyReruns(t *testing.T) {
	acked := []crashtest.TaskAck{{Thread: "t1", Task: "x", Gen: 2}, {Thread: "t1", Task: "x", Gen: 4}}
	run := func(thread, task string, gen int) crashtest.Effect {
		return crashtest.Effect{Kind: "run", Key: task, Subject: thread, Gen: gen}
	}
	for _, tc := range []struct {
		name string
		runs []crashtest.Effect
		want []crashtest.CheckName
	}{
		{"ran before and while acknowledged", []crashtest.Effect{run("t1", "x", 1), run("t1", "x", 2)}, nil},
		{"other tasks and threads", []crashtest.Effect{run("t2", "x", 5), run("t1", "y", 5)}, nil},
		{"ran after its acknowledgement", []crashtest.Effect{run("t1", "x", 3)}, []crashtest.CheckName{crashtest.CheckRerun}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := crashtest.VerifyReruns(acked, tc.runs)
			if diff := cmp.Diff(tc.want, checks(vs)); diff != "" {
				t.Errorf("(-want +got):\n%s\n%v", diff, vs.Err())
			}
		})
	}
}

func TestVerifyRepeats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		repeats []crashtest.Effect
		want    []crashtest.CheckName
	}{
		{"none", nil, nil},
		{"one", []crashtest.Effect{{Kind: "repeat", Key: "k1", Subject: "o1", Gen: 2}}, []crashtest.CheckName{crashtest.CheckCallOnce}},
		{"two", []crashtest.Effect{{Kind: "repeat", Key: "k1", Gen: 2}, {Kind: "repeat", Key: "k2", Gen: 3}}, []crashtest.CheckName{crashtest.CheckCallOnce}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := crashtest.VerifyRepeats(tc.repeats)
			if diff := cmp.Diff(tc.want, checks(vs)); diff != "" {
				t.Errorf("(-want +got):\n%s\n%v", diff, vs.Err())
			}
			if len(vs) != len(tc.repeats) {
				t.Errorf("%d violations for %d repeats: %v", len(vs), len(tc.repeats), vs.Err())
			}
		})
	}
}

// checkState is the state of the graphs of TestVerifyCheckpoints.
type checkState struct {
	Log []string `lockstep:"append"`
}

func TestVerifyCheckpoints(t *testing.T) {
	ctx := t.Context()
	s := checkpoint.NewMemorySaver(nil)
	step := func(name string) graph.NodeFunc[checkState] {
		return func(ctx context.Context, _ checkState) (graph.Update[checkState], error) {
			return graph.Set(checkState{Log: []string{name}}, "Log"), nil
		}
	}
	ask := func(ctx context.Context, _ checkState) (graph.Update[checkState], error) {
		ans, err := interrupt.Ask[string](ctx, "ok?")
		if err != nil {
			return graph.Update[checkState]{}, err
		}
		return graph.Set(checkState{Log: []string{ans}}, "Log"), nil
	}
	fail := func(ctx context.Context, _ checkState) (graph.Update[checkState], error) {
		return graph.Update[checkState]{}, errors.New("boom")
	}
	build := func(second graph.NodeFunc[checkState]) *graph.Runnable[checkState] {
		r, err := graph.New[checkState]().AddNode("a", step("a")).AddNode("b", second).
			AddEdge(graph.START, "a").AddEdge("a", "b").Compile(graph.WithSaver(s))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	done, waiting, failed := build(step("b")), build(ask), build(fail)
	if _, err := done.Invoke(ctx, "done", graph.Update[checkState]{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waiting.Invoke(ctx, "waiting", graph.Update[checkState]{}); err != nil {
		t.Fatal(err)
	}
	if _, err := failed.Invoke(ctx, "failed", graph.Update[checkState]{}); err == nil {
		t.Fatal("the failing graph did not fail")
	}
	pending, err := done.Invoke(ctx, "pending", graph.Update[checkState]{}, graph.InterruptBefore("b"))
	if err != nil {
		t.Fatal(err)
	}
	acked := func(thread string) []crashtest.CheckpointAck {
		tps, err := s.List(ctx, thread, checkpoint.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []crashtest.CheckpointAck
		for _, tp := range tps {
			out = append(out, crashtest.CheckpointAck{Thread: thread, ID: tp.Checkpoint.ID, Gen: 1})
		}
		return out
	}
	snapshot := func(ctx context.Context, thread string) (crashtest.SnapshotView, error) {
		snap, err := done.GetState(ctx, thread)
		if err != nil {
			return crashtest.SnapshotView{}, err
		}
		sv := crashtest.SnapshotView{Status: string(snap.Status), Next: snap.Next}
		for _, in := range snap.Interrupts {
			sv.Interrupts = append(sv.Interrupts, in.ID)
		}
		return sv, nil
	}
	states, vs := crashtest.VerifyCheckpoints(ctx, onlySaver{s}, []string{"done", "waiting"}, append(acked("done"), acked("waiting")...), crashtest.CheckpointOptions{Snapshot: snapshot})
	if err := vs.Err(); err != nil {
		t.Fatalf("healthy threads: %v", err)
	}
	if got := states["done"].Status + " " + states["waiting"].Status; got != "done waiting" || len(states["waiting"].Interrupts) != 1 {
		t.Errorf("statuses %q, interrupts %v", got, states["waiting"].Interrupts)
	}
	if pending.Status != graph.StatusWaiting {
		t.Fatalf("breakpoint run: %s", pending.Status)
	}

	// A fork not marked as one: a second child of the thread's first
	// checkpoint. And a marked one: a replay from it.
	for _, th := range []string{"fork-bad", "fork-ok"} {
		if _, err := done.Invoke(ctx, th, graph.Update[checkState]{}); err != nil {
			t.Fatal(err)
		}
	}
	first := func(thread string) checkpoint.Checkpoint {
		tps, err := s.List(ctx, thread, checkpoint.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tps[len(tps)-1].Checkpoint
	}
	root := first("fork-bad")
	heads, err := s.List(ctx, "fork-bad", checkpoint.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease := checkpoint.Lease{Owner: "forker", TTL: time.Minute}
	// A second child of the first checkpoint, sorting after the head (a
	// saver refuses a fork that could never become the head).
	bad := checkpoint.Checkpoint{ID: heads[0].Checkpoint.ID + "z", ParentID: root.ID, Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: root.Metadata.Step + 1}, Versions: map[string]string{}}
	if err := s.Put(ctx, checkpoint.PutRequest{Thread: "fork-bad", Checkpoint: bad, Fork: true, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if _, err := done.Replay(ctx, "fork-ok", first("fork-ok").ID); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		thread string
		acked  []crashtest.CheckpointAck
		opts   crashtest.CheckpointOptions
		want   []crashtest.CheckName
	}{
		{name: "failed thread", thread: "failed", acked: acked("failed"), want: []crashtest.CheckName{crashtest.CheckStatus}},
		{name: "failed thread allowed", thread: "failed", opts: crashtest.CheckpointOptions{AllowFailed: true}},
		{name: "breakpoint", thread: "pending", acked: acked("pending")},
		{name: "lost acknowledged checkpoint", thread: "done", acked: []crashtest.CheckpointAck{{Thread: "done", ID: "no-such-checkpoint"}},
			want: []crashtest.CheckName{crashtest.CheckAcked}},
		{name: "lost thread", thread: "nothing", acked: []crashtest.CheckpointAck{{Thread: "nothing", ID: "cp"}},
			want: []crashtest.CheckName{crashtest.CheckAcked}},
		{name: "fork", thread: "fork-bad", acked: acked("fork-bad"), want: []crashtest.CheckName{crashtest.CheckAcked, crashtest.CheckFork}},
		{name: "explicit fork", thread: "fork-ok", acked: acked("fork-ok")},
		{name: "the runtime disagrees", thread: "done", opts: crashtest.CheckpointOptions{Snapshot: func(context.Context, string) (crashtest.SnapshotView, error) {
			return crashtest.SnapshotView{Status: "pending"}, nil
		}}, want: []crashtest.CheckName{crashtest.CheckConsistent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only this thread: the saver without its ThreadLister.
			_, vs := crashtest.VerifyCheckpoints(ctx, onlySaver{s}, []string{tc.thread}, tc.acked, tc.opts)
			if diff := cmp.Diff(tc.want, checks(vs)); diff != "" {
				t.Errorf("(-want +got):\n%s\n%v", diff, vs.Err())
			}
		})
	}
}

// onlySaver hides a saver's optional interfaces (ThreadLister).
type onlySaver struct{ checkpoint.Saver }

func TestVerifyIntegrity(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "i.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if vs := crashtest.VerifyIntegrity(t.Context(), s.DB()); vs != nil {
		t.Errorf("a fresh database: %v", vs)
	}
	s.Close()
	if vs := crashtest.VerifyIntegrity(t.Context(), s.DB()); len(vs) != 1 || vs[0].Check != crashtest.CheckIntegrity {
		t.Errorf("a closed database: %v", vs)
	}
}

func TestAckWrappers(t *testing.T) {
	ctx := t.Context()
	var buf bytes.Buffer
	rep := crashtest.NewReporter(&buf)
	s := crashtest.AckSaver(checkpoint.NewMemorySaver(nil), rep)
	val := json.RawMessage(`1`)
	cp := checkpoint.Checkpoint{ID: "c1", Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1}, Versions: map[string]string{"x": "c1"},
		Channels: map[string][]checkpoint.Blob{"x": {{Version: "c1", Data: val}}}}
	lease := checkpoint.Lease{Owner: "me", TTL: time.Minute}
	if err := s.Put(ctx, checkpoint.PutRequest{Thread: "t", Checkpoint: cp, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, checkpoint.PutRequest{Thread: "t", Checkpoint: cp, Lease: lease}); err == nil {
		t.Fatal("a second Put of the same checkpoint was accepted")
	}
	err := s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: "c1"}, Lease: lease, Tasks: []checkpoint.TaskWrites{
		{TaskID: "finished", Node: "a", Writes: []checkpoint.Write{{Channel: "x", Value: val}}},
		{TaskID: "paused", Node: "b", Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: json.RawMessage(`[]`)}}},
		{TaskID: checkpoint.CommandTaskID(1), Writes: []checkpoint.Write{{Channel: "x", Value: val}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.NewMemory(ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	al := crashtest.AckLedger(l, rep)
	for _, k := range []string{"ok", "failed"} {
		if _, _, err := al.Begin(ctx, ledger.Intent{Key: k, Tool: "pay", Owner: "me"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := al.Complete(ctx, "ok", "me", ledger.Outcome{Result: val}); err != nil {
		t.Fatal(err)
	}
	if err := al.Complete(ctx, "failed", "me", ledger.Outcome{Failure: &ledger.Failure{Class: "permanent"}}); err != nil {
		t.Fatal(err)
	}
	if err := al.Complete(ctx, "ok", "someone else", ledger.Outcome{Result: val}); err == nil {
		t.Fatal("Complete by another owner was accepted")
	}
	want := "ACK t c1\nTASK-ACK t finished\nEFFECT-ACK ok\n"
	if got := buf.String(); got != want {
		t.Errorf("acknowledged:\n%s\nwant:\n%s", got, want)
	}
}

// TestAckJoiner: the wrapper of a saver that runs joins acknowledges as
// AckSaver's does, runs a Put's joins in the saver's transaction, and
// fences as the saver does.
func TestAckJoiner(t *testing.T) {
	ctx := t.Context()
	var buf bytes.Buffer
	sv, err := sqlite.Open(filepath.Join(t.TempDir(), "j.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Close()
	s := crashtest.AckJoiner(sv, crashtest.NewReporter(&buf))
	var joined, fenced int
	join := func(context.Context, any) error { joined++; return nil }
	val := json.RawMessage(`1`)
	cp := checkpoint.Checkpoint{ID: "01J00000000000000000000001", Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1},
		Versions: map[string]string{"x": "01J00000000000000000000001"}, Channels: map[string][]checkpoint.Blob{"x": {{Version: "01J00000000000000000000001", Data: val}}}}
	lease := checkpoint.Lease{Owner: "me", TTL: time.Minute}
	if err := s.Put(ctx, checkpoint.PutRequest{Thread: "t", Checkpoint: cp, Lease: lease, Joins: []checkpoint.Join{join}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fenced(ctx, "t", "me", func(context.Context, any) error { fenced++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Fenced(ctx, "t", "another", join); !errors.Is(err, checkpoint.ErrThreadBusy) {
		t.Errorf("Fenced by another owner: %v, want ErrThreadBusy", err)
	}
	if joined != 1 || fenced != 1 {
		t.Errorf("joins run %d times, fenced work %d times; want 1 and 1", joined, fenced)
	}
	if want := "ACK t 01J00000000000000000000001\n"; buf.String() != want {
		t.Errorf("acknowledged %q, want %q", buf.String(), want)
	}
	if !crashtest.Known(crashtest.PGJoinBeforeCommit) || !crashtest.Known(crashtest.PutBegin) || crashtest.Known("postgres.nowhere") {
		t.Error("Known does not know the Postgres points (or knows one that is not)")
	}
}
