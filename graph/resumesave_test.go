package graph_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/retry"
)

// opSaver records the saver's write calls as strings ("claim", "put:<the
// channels of its parent writes>", "writes:<channels>") and fails, without
// writing, the calls fail picks.
type opSaver struct {
	checkpoint.Saver
	mu   sync.Mutex
	ops  []string
	fail func(op string) bool
}

func (s *opSaver) setFail(fail func(op string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

func (s *opSaver) record(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil && s.fail(op) {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	s.ops = append(s.ops, op)
	return nil
}

func (s *opSaver) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := s.ops
	s.ops = nil
	return ops
}

func channelsOf(tws []checkpoint.TaskWrites) string {
	var chs []string
	for _, tw := range tws {
		for _, w := range tw.Writes {
			chs = append(chs, w.Channel)
		}
	}
	slices.Sort(chs)
	return fmt.Sprint(chs)
}

func (s *opSaver) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	if err := s.record("claim"); err != nil {
		return err
	}
	return s.Saver.Claim(ctx, ref, l)
}

func (s *opSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if err := s.record("put:" + channelsOf(req.ParentWrites)); err != nil {
		return err
	}
	return s.Saver.Put(ctx, req)
}

func (s *opSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if err := s.record("writes:" + channelsOf(req.Tasks)); err != nil {
		return err
	}
	return s.Saver.PutWrites(ctx, req)
}

// askGraph is START → a → ask → b → END; ask asks once, or twice with
// twice, runs a durable step after the first answer when durable is set,
// and writes its answers to Log. runs counts the runs of each node and of
// the durable step.
func askGraph(durable, twice bool, runs map[string]int, opts ...graph.NodeOption) *graph.Graph[State] {
	var mu sync.Mutex
	count := func(k string) {
		mu.Lock()
		runs[k]++
		mu.Unlock()
	}
	return graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			count("a")
			return graph.Set(State{Log: []string{"a"}}, "Log"), nil
		}).
		AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
			count("ask")
			ans, err := interrupt.Ask[string](ctx, "first?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			if durable {
				if _, err := graph.Durable(ctx, "effect", func(ctx context.Context) (string, error) {
					count("effect")
					return "done:" + ans, nil
				}); err != nil {
					return graph.Update[State]{}, err
				}
			}
			log := []string{"ask:" + ans}
			if twice {
				ans2, err := interrupt.Ask[string](ctx, "second?")
				if err != nil {
					return graph.Update[State]{}, err
				}
				log = append(log, "ask:"+ans2)
			}
			return graph.Set(State{Log: log}, "Log"), nil
		}, opts...).
		AddNode("b", func(ctx context.Context, s State) (graph.Update[State], error) {
			count("b")
			return graph.Set(State{Log: []string{"b"}}, "Log"), nil
		}).
		AddEdge(graph.START, "a").AddEdge("a", "ask").AddEdge("ask", "b").AddEdge("b", graph.END)
}

// TestResumeSavesAnswersWithItsFirstWrite: a resume that only answers
// claims the thread and saves the answers with the run's first write: the
// resumed step's checkpoint, the interrupts that end it again, or a
// durable step's fence (which then needs no claim of its own). History
// reads the same as when the answers had a transaction of their own.
func TestResumeSavesAnswersWithItsFirstWrite(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name           string
		durable, twice bool
		resumes        []string
		want           []string // saver calls of the last resume
		wantRuns       map[string]int
		wantLog        []string
	}{
		{
			name:     "the step's checkpoint",
			resumes:  []string{"yes"},
			want:     []string{"claim", "put:[Log __resume__ branch:to:b]", "put:[Log]"},
			wantRuns: map[string]int{"a": 1, "ask": 2, "b": 1},
			wantLog:  []string{"a", "ask:yes", "b"},
		},
		{
			name:     "a durable step's fence",
			durable:  true,
			resumes:  []string{"yes"},
			want:     []string{"claim", "writes:[__resume__]", "writes:[__step__:0]", "put:[Log branch:to:b]", "put:[Log]"},
			wantRuns: map[string]int{"a": 1, "ask": 2, "effect": 1, "b": 1},
			wantLog:  []string{"a", "ask:yes", "b"},
		},
		{
			name:     "the interrupt of a second ask",
			twice:    true,
			resumes:  []string{"one"},
			want:     []string{"claim", "writes:[__interrupt__ __resume__]"},
			wantRuns: map[string]int{"a": 1, "ask": 2},
		},
		{
			name:     "a second ask, answered",
			twice:    true,
			durable:  true,
			resumes:  []string{"one", "two"},
			want:     []string{"claim", "put:[Log __resume__ branch:to:b]", "put:[Log]"},
			wantRuns: map[string]int{"a": 1, "ask": 3, "effect": 1, "b": 1},
			wantLog:  []string{"a", "ask:one", "ask:two", "b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &opSaver{Saver: checkpoint.NewMemorySaver(nil)}
			runs := map[string]int{}
			r, err := askGraph(tc.durable, tc.twice, runs).Compile(graph.WithSaver(s))
			if err != nil {
				t.Fatal(err)
			}
			if res, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil || res.Status != graph.StatusWaiting {
				t.Fatalf("invoke: %v %v", res.Status, err)
			}
			var res graph.Result[State]
			for _, ans := range tc.resumes {
				s.take()
				if res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: ans}); err != nil {
					t.Fatalf("resume %q: %v", ans, err)
				}
			}
			if diff := cmp.Diff(tc.want, s.take()); diff != "" {
				t.Errorf("saver calls of the last resume (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRuns, runs); diff != "" {
				t.Errorf("runs (-want +got):\n%s", diff)
			}
			if tc.wantLog == nil {
				if res.Status != graph.StatusWaiting {
					t.Errorf("status %s, want waiting", res.Status)
				}
				return
			}
			if res.Status != graph.StatusDone {
				t.Errorf("status %s, want done", res.Status)
			}
			if diff := cmp.Diff(tc.wantLog, res.Values.Log); diff != "" {
				t.Errorf("final log (-want +got):\n%s", diff)
			}
			// The checkpoint ask waited on shows its task with the
			// interrupts, every answer, and its result.
			hist, err := r.History(ctx, "t", graph.HistoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var asked *graph.Snapshot[State]
			for i := range hist {
				if len(hist[i].Tasks) == 1 && hist[i].Tasks[0].Name == "ask" {
					asked = &hist[i]
				}
			}
			if asked == nil {
				t.Fatal("no checkpoint with ask's task in history")
			}
			task := asked.Tasks[0]
			if len(task.Interrupts) == 0 || len(task.Answered) != len(tc.resumes) || task.Result == nil {
				t.Errorf("ask's task in history: %+v, want its interrupts, %d answers and a result", task, len(tc.resumes))
			}
		})
	}
}

// TestResumeAnswersSurviveAFailedWrite: when the write that would carry a
// resume's answers fails, the answers stay held and are saved by the next
// write or when the run ends, so an answer is lost only when nothing could
// be written; a retry of the resume is then refused as already answered,
// and Continue finishes with the saved answer.
func TestResumeAnswersSurviveAFailedWrite(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		durable    bool
		retry      bool
		fail       string // the saver call that fails (once)
		failAll    bool   // and every write after it
		wantStatus graph.Status
		wantRuns   int // runs of the durable step
	}{
		{name: "fence fails, node retried", durable: true, retry: true, fail: "writes:[__resume__]", wantStatus: graph.StatusDone, wantRuns: 1},
		{name: "fence fails, no retry", durable: true, fail: "writes:[__resume__]", wantStatus: graph.StatusFailed},
		{name: "step's checkpoint fails", fail: "put:[Log __resume__ branch:to:b]", wantStatus: graph.StatusPending},
		{name: "every write fails", fail: "put:[Log __resume__ branch:to:b]", failAll: true, wantStatus: graph.StatusWaiting},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &opSaver{Saver: checkpoint.NewMemorySaver(nil)}
			runs := map[string]int{}
			var opts []graph.NodeOption
			if tc.retry {
				opts = append(opts, graph.WithRetry(retry.Policy{MaxAttempts: 2, Initial: time.Millisecond}))
			}
			r, err := askGraph(tc.durable, false, runs, opts...).Compile(graph.WithSaver(s))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil {
				t.Fatal(err)
			}
			failed := false
			s.setFail(func(op string) bool {
				switch {
				case !failed && op == tc.fail:
					failed = true
					return true
				case failed && tc.failAll:
					return op != "claim"
				}
				return false
			})
			_, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
			if tc.wantStatus != graph.StatusDone && !errors.Is(err, errInjected) {
				t.Errorf("resume: %v, want the injected failure", err)
			}
			if tc.wantStatus == graph.StatusDone && err != nil {
				t.Errorf("resume: %v", err)
			}
			s.setFail(nil)
			snap, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != tc.wantStatus {
				t.Fatalf("status after the resume: %s, want %s", snap.Status, tc.wantStatus)
			}
			want := []string{"a", "ask:yes", "b"}
			switch snap.Status {
			case graph.StatusFailed, graph.StatusPending:
				// The answer was kept: resuming again is refused, and
				// Continue finishes with it.
				if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "again"}); !errors.Is(err, graph.ErrNothingToResume) {
					t.Errorf("second resume: %v, want ErrNothingToResume", err)
				}
				if _, err := r.Continue(ctx, "t"); err != nil {
					t.Fatalf("continue: %v", err)
				}
			case graph.StatusWaiting:
				// Nothing was saved: the resume can be made again.
				if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "again"}); err != nil {
					t.Fatalf("second resume: %v", err)
				}
				want = []string{"a", "ask:again", "b"}
			}
			snap, err = r.GetState(ctx, "t")
			if err != nil || snap.Status != graph.StatusDone {
				t.Fatalf("final state: %v %v", snap.Status, err)
			}
			if diff := cmp.Diff(want, snap.Values.Log); diff != "" {
				t.Errorf("final log (-want +got):\n%s", diff)
			}
			if tc.durable && runs["effect"] != 1 {
				t.Errorf("the durable step ran %d times, want 1", runs["effect"])
			}
		})
	}
}
