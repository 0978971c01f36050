package checkpointtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func concurrencyCases() []testCase {
	return []testCase{
		{name: "RacingPutsDistinctOwners", run: func(t *testing.T, f *fixture) { testRacingPuts(t, f, false) }},
		{name: "RacingPutsOneOwner", run: func(t *testing.T, f *fixture) { testRacingPuts(t, f, true) }},
		{name: "ConcurrentPendingWrites", run: testConcurrentWrites},
		{name: "ReadersDuringWrites", run: testReadersDuringWrites},
	}
}

// testRacingPuts: N goroutines Put a child of the same head at once.
// Exactly one wins; the others get a ConflictError, or a BusyError when
// they are other owners; the thread has exactly one child of that parent
// (D5, R11). Several rounds, each from the previous winner.
func testRacingPuts(t *testing.T, f *fixture, oneOwner bool) {
	const racers, rounds = 16, 5
	l := f.line("thread-1", "")
	l.lease = owned("setup")
	req := l.request(t, "", fresh("log", `["start"]`))
	req.Release = true
	l.put(t, req)
	for round := 0; round < rounds; round++ {
		parent := l.head
		reqs := make([]checkpoint.PutRequest, racers)
		for i := range reqs {
			reqs[i] = l.request(t, parent, add("log", fmt.Sprintf(`["round %d racer %d"]`, round, i)), set("winner", fmt.Sprint(i)))
			if oneOwner {
				reqs[i].Lease = owned("racer")
			} else {
				reqs[i].Lease = owned(fmt.Sprintf("racer-%d", i))
				reqs[i].Release = true // so that the next round starts free
			}
		}
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = f.s.Put(t.Context(), reqs[i])
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Errorf("round %d: racers %d and %d both committed a child of %s", round, winner, i, parent)
				}
				winner = i
			case errors.Is(err, checkpoint.ErrConflict):
			case !oneOwner && errors.Is(err, checkpoint.ErrThreadBusy):
			default:
				t.Errorf("round %d: racer %d: error = %v, want ErrConflict or ErrThreadBusy", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no racer committed", round)
		}
		l.commit(t, reqs[winner])
		var children []string
		for _, tp := range f.list(t, "thread-1", checkpoint.ListOptions{AllNamespaces: true}) {
			if tp.Checkpoint.ParentID == parent {
				children = append(children, tp.Checkpoint.ID)
			}
		}
		if want := []string{reqs[winner].Checkpoint.ID}; !cmp.Equal(children, want) {
			t.Fatalf("round %d: children of %s = %v, want exactly the winner's %v", round, parent, children, want)
		}
		l.checkGet(t, "")
	}
	for _, id := range l.ids() {
		l.checkGet(t, id)
	}
}

// testConcurrentWrites: concurrent PutWrites of the same task store it
// once; of different tasks store them all.
func testConcurrentWrites(t *testing.T, f *fixture) {
	const n = 16
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `0`))
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		tw := task("task-same", wr("a", `1`), wr(checkpoint.ChannelError, `{"message":"same"}`))
		if i%2 == 1 {
			tw = task(fmt.Sprintf("task-%02d", i), wr("v", fmt.Sprint(i)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(c1), Lease: l.lease, Tasks: []checkpoint.TaskWrites{tw}})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	var want []writeView
	for i := 1; i < n; i += 2 {
		want = append(want, writeView{TaskID: fmt.Sprintf("task-%02d", i), Channel: "v", Value: float64(i)})
	}
	want = append(want,
		writeView{TaskID: "task-same", Channel: checkpoint.ChannelError, Value: map[string]any{"message": "same"}},
		writeView{TaskID: "task-same", Channel: "a", Value: 1.0},
	)
	f.wantPending(t, l.ref(c1), want)
}

// testReadersDuringWrites: readers that Get the head (passing what they
// hold as Have, as the runtime does) and List while a writer appends
// always see a complete checkpoint that matches the model: no torn reads.
func testReadersDuringWrites(t *testing.T, f *fixture) {
	const steps, readers = 60, 4
	l := f.line("thread-1", "")
	l.step(t, fresh("msgs", `[0]`), set("n", `0`))
	var reqs []checkpoint.PutRequest
	for i := 1; i <= steps; i++ {
		cs := []change{add("msgs", fmt.Sprintf(`[%d]`, i))}
		if i%4 == 0 {
			cs = append(cs, set("n", fmt.Sprint(i)))
		}
		req := l.request(t, l.head, cs...)
		l.commit(t, req) // the model knows every state up front
		reqs = append(reqs, req)
	}
	expect := map[string]tupleView{}
	for _, id := range l.ids() {
		expect[id] = l.expect(t, id)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for _, req := range reqs {
			if err := f.s.Put(t.Context(), req); err != nil {
				t.Errorf("writer: Put(%s): %v", req.Checkpoint.ID, err)
				return
			}
		}
	}()
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var have map[string]string
			var held map[string]Held
			for reads := 0; ; reads++ {
				select {
				case <-done:
					if reads > 0 {
						return
					}
				default:
				}
				var tps []*checkpoint.Tuple
				if r%2 == 0 {
					tp, err := f.s.Get(t.Context(), l.ref(""), checkpoint.GetOptions{Have: have})
					if err != nil {
						t.Errorf("reader %d: Get: %v", r, err)
						return
					}
					tps = []*checkpoint.Tuple{tp}
				} else {
					var err error
					if tps, err = f.s.List(t.Context(), "thread-1", checkpoint.ListOptions{Limit: 2}); err != nil {
						t.Errorf("reader %d: List: %v", r, err)
						return
					}
				}
				for _, tp := range tps {
					got, err := viewOf(tp, held)
					if err != nil {
						t.Errorf("reader %d: %v", r, err)
						return
					}
					if diff := cmp.Diff(expect[tp.Checkpoint.ID], got, cmpOpts...); diff != "" {
						t.Errorf("reader %d: checkpoint %s mismatch (-want +got):\n%s", r, tp.Checkpoint.ID, diff)
						return
					}
					if r%2 == 0 {
						have, held = got.Versions, map[string]Held{}
						for ch, v := range got.Values {
							b, _ := json.Marshal(v)
							held[ch] = Held{Version: got.Versions[ch], Value: b}
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	l.checkGet(t, "")
}
