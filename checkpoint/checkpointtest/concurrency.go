package checkpointtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func concurrencyCases() []testCase {
	return []testCase{
		{name: "RacingPutsDistinctOwners", run: func(t *testing.T, f *fixture) { testRacingPuts(t, f, false) }},
		{name: "RacingPutsOneOwner", run: func(t *testing.T, f *fixture) { testRacingPuts(t, f, true) }},
		{name: "ConcurrentPendingWrites", run: testConcurrentWrites},
		{name: "ReadersDuringWrites", run: testReadersDuringWrites},
		{name: "ConcurrentThreadsSomeRefused", run: testConcurrentThreadsSomeRefused},
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

// testConcurrentThreadsSomeRefused: many runs commit at once, each on its
// own thread, as a server's runs do (a saver may commit them in one
// transaction: group commit, D3), among them requests the saver must
// refuse: a Put on a parent that is no longer the head (ConflictError),
// a Put and a PutWrites under another owner's live lease (BusyError), a
// Held Put of an owner whose lease passed on (fenced: BusyError) and a
// PutWrites on a checkpoint that is not the head. Each request keeps its
// own result: every refused one fails alone and writes nothing, every
// other one commits, with its pending writes, in every round.
func testConcurrentThreadsSomeRefused(t *testing.T, f *fixture) {
	const runs, rounds = 12, 4
	lines := make([]*line, runs)
	for i := range lines {
		lines[i] = f.line(fmt.Sprintf("thread-%02d", i), "")
		lines[i].lease = owned(fmt.Sprintf("runner-%02d", i))
		lines[i].step(t, set("n", `0`))
	}
	// stale: its head moves on from old before each round's stale Put.
	stale := f.line("thread-stale", "")
	stale.lease = owned("runner-stale")
	old := stale.step(t, set("n", `0`))
	stale.step(t, set("n", `1`))
	// busy: "holder" keeps a live lease; "intruder" writes.
	busy := f.line("thread-busy", "")
	busy.lease = owned("holder")
	busy.step(t, set("n", `0`))
	// fenced: runner-a held it, runner-b took it over and released it.
	fenced := f.line("thread-fenced", "")
	fenced.lease = owned("runner-a")
	fenced.step(t, set("n", `0`))
	f.clock.Advance(ttl + time.Second)
	f.claim(t, fenced.ref(fenced.head), owned("runner-b"))
	if err := f.s.Release(t.Context(), fenced.thread, "", "runner-b"); err != nil {
		t.Fatal(err)
	}
	heldA := owned("runner-a")
	heldA.Held = true
	for i := range lines { // the clock moved: renew the runs' leases
		f.claim(t, lines[i].ref(lines[i].head), lines[i].lease)
	}
	f.claim(t, busy.ref(busy.head), busy.lease)

	for round := 0; round < rounds; round++ {
		refusedBefore := map[string]threadDump{}
		for _, l := range []*line{stale, busy, fenced} {
			refusedBefore[l.thread] = f.dump(t, l.thread)
		}
		type job struct {
			what   string
			do     func() error
			refuse error // nil: must commit
		}
		var jobs []job
		reqs := make([]checkpoint.PutRequest, runs)
		for i, l := range lines {
			reqs[i] = l.request(t, l.head, set("n", fmt.Sprint(round+1)))
			reqs[i].Writes = nil
			if i%3 == 0 {
				// A pending write of the head, beside the Puts.
				ref := l.ref(l.head)
				tw := task(fmt.Sprintf("task-r%d", round), wr("v", fmt.Sprint(round)))
				jobs = append(jobs, job{what: fmt.Sprintf("PutWrites on %s", l.thread), do: func() error {
					return f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: ref, Lease: l.lease, Tasks: []checkpoint.TaskWrites{tw}})
				}})
				continue
			}
			req := reqs[i]
			jobs = append(jobs, job{what: fmt.Sprintf("Put on %s", l.thread), do: func() error { return f.s.Put(t.Context(), req) }})
		}
		staleReq := stale.requestID(t, f.id(), old, set("n", `"stale"`))
		busyReq := busy.request(t, busy.head, set("n", `"intruder"`))
		busyReq.Lease = owned("intruder")
		fencedReq := fenced.request(t, fenced.head, set("n", `"fenced"`))
		fencedReq.Lease = heldA
		notHead := stale.ref(old)
		jobs = append(jobs,
			job{what: "Put on a parent that is not the head", do: func() error { return f.s.Put(t.Context(), staleReq) }, refuse: checkpoint.ErrConflict},
			job{what: "Put under another owner's live lease", do: func() error { return f.s.Put(t.Context(), busyReq) }, refuse: checkpoint.ErrThreadBusy},
			job{what: "PutWrites under another owner's live lease", do: func() error {
				return f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: busy.ref(busy.head), Lease: owned("intruder"),
					Tasks: []checkpoint.TaskWrites{task("task-intruder", wr("v", `1`))}})
			}, refuse: checkpoint.ErrThreadBusy},
			job{what: "Held Put of a superseded owner", do: func() error { return f.s.Put(t.Context(), fencedReq) }, refuse: checkpoint.ErrThreadBusy},
			job{what: "PutWrites on a checkpoint that is not the head", do: func() error {
				return f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: notHead, Lease: stale.lease,
					Tasks: []checkpoint.TaskWrites{task("task-stale", wr("v", `1`))}})
			}, refuse: checkpoint.ErrConflict},
		)
		// Refused requests among the others, not all at one end.
		rand.New(rand.NewPCG(uint64(round), 7)).Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		errs := make([]error, len(jobs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = jobs[i].do()
			}()
		}
		close(start)
		wg.Wait()
		for i, j := range jobs {
			switch {
			case j.refuse == nil && errs[i] != nil:
				t.Errorf("round %d: %s: %v, want it committed", round, j.what, errs[i])
			case j.refuse != nil && !errors.Is(errs[i], j.refuse):
				t.Errorf("round %d: %s: %v, want an error matching %v", round, j.what, errs[i], j.refuse)
			}
		}
		for i, l := range lines {
			if i%3 != 0 {
				l.commit(t, reqs[i])
			}
		}
		for l, before := range refusedBefore {
			f.unchanged(t, fmt.Sprintf("round %d: the refused requests", round), l, before)
		}
	}
	for i, l := range lines {
		l.checkGet(t, "")
		if i%3 != 0 {
			continue
		}
		var want []writeView
		for round := 0; round < rounds; round++ {
			want = append(want, writeView{TaskID: fmt.Sprintf("task-r%d", round), Channel: "v", Value: float64(round)})
		}
		f.wantPending(t, l.ref(l.head), want)
	}
}
