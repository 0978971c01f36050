package checkpointtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func topologyCases() []testCase {
	return []testCase{
		{name: "RoundTrip", run: testTopologyRoundTrip},
		{name: "StoredOnce", run: testTopologyStoredOnce},
		{name: "Newest", run: testTopologyNewest},
		{name: "NotFound", run: testTopologyNotFound},
		{name: "Validation", run: testTopologyValidation},
		{name: "Concurrent", run: testTopologyConcurrent},
		{name: "Aliasing", run: testTopologyAliasing},
		{name: "CancelledWritesNothing", run: testTopologyCancelled},
		{name: "ThreadsAreNotTopologies", run: testTopologyThreads},
		{name: "Reopen", reopen: true, run: testTopologyReopen},
	}
}

// topo returns a stored topology of graph name whose data is a small JSON
// object holding body.
func topo(name, body string) checkpoint.Topology {
	data := []byte(fmt.Sprintf(`{"format":1,"name":%q,"body":%q}`, name, body))
	return checkpoint.Topology{Fingerprint: checkpoint.TopologyFingerprint(data), Name: name, Data: data}
}

func (f *fixture) topologies(t *testing.T) checkpoint.TopologyStore {
	t.Helper()
	ts, ok := f.s.(checkpoint.TopologyStore)
	if !ok {
		t.Fatalf("%T does not implement checkpoint.TopologyStore", f.s)
	}
	return ts
}

func (f *fixture) putTopology(t *testing.T, tp checkpoint.Topology) {
	t.Helper()
	if err := f.topologies(t).PutTopology(t.Context(), tp); err != nil {
		t.Fatalf("PutTopology(%s of %q): %v", tp.Fingerprint, tp.Name, err)
	}
}

// wantTopology checks what Topology(want.Fingerprint) returns: the same
// fingerprint, name and data byte for byte (the data must hash to the
// fingerprint, so a saver cannot re-encode it), and the times given.
func (f *fixture) wantTopology(t *testing.T, what string, want checkpoint.Topology, created, stored time.Time) {
	t.Helper()
	got, err := f.topologies(t).Topology(t.Context(), want.Fingerprint)
	if err != nil {
		t.Fatalf("%s: Topology(%s): %v", what, want.Fingerprint, err)
	}
	want.CreatedAt, want.StoredAt = created, stored
	if d := cmp.Diff(want, got, cmpOpts...); d != "" {
		t.Errorf("%s: Topology(%s) (-want +got):\n%s", what, want.Fingerprint, d)
	}
}

// wantNewest checks that LatestTopology(name) is want.
func (f *fixture) wantNewest(t *testing.T, what, name string, want checkpoint.Topology) {
	t.Helper()
	got, err := f.topologies(t).LatestTopology(t.Context(), name)
	if err != nil {
		t.Fatalf("%s: LatestTopology(%q): %v", what, name, err)
	}
	if got.Fingerprint != want.Fingerprint || string(got.Data) != string(want.Data) || got.Name != name {
		t.Errorf("%s: LatestTopology(%q) = %s of %q, want %s", what, name, got.Fingerprint, got.Name, want.Fingerprint)
	}
}

// testTopologyRoundTrip: a stored topology reads back by fingerprint and
// as the newest of its name, with its data byte for byte and CreatedAt
// and StoredAt both the saver's time of the store; the times the caller
// sets are ignored.
func testTopologyRoundTrip(t *testing.T, f *fixture) {
	a := topo("orders", "a, with \u00e9 and \"quotes\" and <html>")
	a.CreatedAt = epoch.Add(-time.Hour)
	a.StoredAt = epoch.Add(time.Hour)
	f.putTopology(t, a)
	a.CreatedAt, a.StoredAt = time.Time{}, time.Time{}
	now := f.clock.Now()
	f.wantTopology(t, "after PutTopology", a, now, now)
	f.wantNewest(t, "after PutTopology", "orders", a)
}

// testTopologyStoredOnce: storing a fingerprint again keeps its data and
// CreatedAt and moves StoredAt to the time of the latest store.
func testTopologyStoredOnce(t *testing.T, f *fixture) {
	a := topo("orders", "a")
	first := f.clock.Now()
	f.putTopology(t, a)
	last := f.clock.Advance(time.Minute)
	f.putTopology(t, a)
	f.putTopology(t, a)
	f.wantTopology(t, "after three stores", a, first, last)
}

// testTopologyNewest: the newest topology of a name is the one stored
// last, by order of the stores (not by clock: the clock does not move
// here), also when an older one is stored again (a rollback); names are
// independent.
func testTopologyNewest(t *testing.T, f *fixture) {
	a, b, h := topo("orders", "a"), topo("orders", "b"), topo("hotels", "a")
	f.putTopology(t, a)
	f.wantNewest(t, "one version", "orders", a)
	f.putTopology(t, b)
	f.wantNewest(t, "a second version", "orders", b)
	f.putTopology(t, h)
	f.wantNewest(t, "another graph's store", "orders", b)
	f.wantNewest(t, "another graph", "hotels", h)
	f.putTopology(t, a)
	f.wantNewest(t, "the first version stored again", "orders", a)
	f.putTopology(t, a)
	f.wantNewest(t, "the same version stored again", "orders", a)
	f.putTopology(t, b)
	f.wantNewest(t, "the second version stored again", "orders", b)
	f.wantNewest(t, "the other graph after all that", "hotels", h)
}

// testTopologyNotFound: a fingerprint or a name nothing was stored under
// gives ErrNotFound; a string that is not a fingerprint, or an empty name,
// ErrInvalid.
func testTopologyNotFound(t *testing.T, f *fixture) {
	ts := f.topologies(t)
	ctx := t.Context()
	f.putTopology(t, topo("orders", "a"))
	_, err := ts.Topology(ctx, topo("orders", "never stored").Fingerprint)
	wantIs(t, "Topology of an unknown fingerprint", err, checkpoint.ErrNotFound)
	_, err = ts.LatestTopology(ctx, "hotels")
	wantIs(t, "LatestTopology of an unknown name", err, checkpoint.ErrNotFound)
	for _, bad := range []string{"", "abc", strings.Repeat("A", 32), strings.Repeat("0", 31) + "g", strings.Repeat("0", 33), "' OR 1=1 --"} {
		_, err := ts.Topology(ctx, bad)
		wantIs(t, fmt.Sprintf("Topology(%q)", bad), err, checkpoint.ErrInvalid)
	}
	_, err = ts.LatestTopology(ctx, "")
	wantIs(t, "LatestTopology of an empty name", err, checkpoint.ErrInvalid)
}

// testTopologyValidation: PutTopology refuses, with ErrInvalid and
// writing nothing, a topology that checkpoint.ValidateTopology refuses,
// and a fingerprint stored under another name.
func testTopologyValidation(t *testing.T, f *fixture) {
	ts := f.topologies(t)
	ctx := t.Context()
	a := topo("orders", "a")
	f.putTopology(t, a)
	stored := f.clock.Now()
	f.clock.Advance(time.Minute)
	big := topo("orders", strings.Repeat("x", checkpoint.MaxTopologyBytes))
	for name, tp := range map[string]checkpoint.Topology{
		"a fingerprint of other data":  {Fingerprint: a.Fingerprint, Name: "orders", Data: []byte(`{"other":1}`)},
		"no fingerprint":               {Name: "orders", Data: a.Data},
		"an uppercase fingerprint":     {Fingerprint: strings.ToUpper(a.Fingerprint), Name: "orders", Data: a.Data},
		"an empty name":                {Fingerprint: a.Fingerprint, Data: a.Data},
		"a name with a newline":        topo("orders\n", "a"),
		"a name too long":              topo(strings.Repeat("n", checkpoint.MaxTopologyNameBytes+1), "a"),
		"a name that is not UTF-8":     topo("orders\xff", "a"),
		"data that is not JSON":        {Fingerprint: checkpoint.TopologyFingerprint([]byte(`{`)), Name: "orders", Data: []byte(`{`)},
		"data that is a JSON array":    {Fingerprint: checkpoint.TopologyFingerprint([]byte(`[]`)), Name: "orders", Data: []byte(`[]`)},
		"data too large":               big,
		"its fingerprint under a name": {Fingerprint: a.Fingerprint, Name: "hotels", Data: a.Data},
	} {
		wantIs(t, "PutTopology with "+name, ts.PutTopology(ctx, tp), checkpoint.ErrInvalid)
		if tp.Fingerprint != a.Fingerprint && checkpoint.ValidFingerprint(tp.Fingerprint) {
			_, err := ts.Topology(ctx, tp.Fingerprint)
			wantIs(t, "Topology after a refused PutTopology with "+name, err, checkpoint.ErrNotFound)
		}
	}
	f.wantTopology(t, "after the refused stores", a, stored, stored)
	_, err := ts.LatestTopology(ctx, "hotels")
	wantIs(t, "LatestTopology of the name a refused store gave", err, checkpoint.ErrNotFound)
}

// testTopologyConcurrent: stores of one fingerprint and of others, from
// many goroutines at once, all succeed, and each fingerprint reads back
// once with its data.
func testTopologyConcurrent(t *testing.T, f *fixture) {
	ts := f.topologies(t)
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				for _, tp := range []checkpoint.Topology{topo("orders", "shared"), topo("orders", fmt.Sprintf("w%d-%d", w, i))} {
					if err := ts.PutTopology(context.Background(), tp); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent PutTopology: %v", err)
	}
	now := f.clock.Now()
	f.wantTopology(t, "the shared fingerprint", topo("orders", "shared"), now, now)
	for w := range workers {
		f.wantTopology(t, "a worker's fingerprint", topo("orders", fmt.Sprintf("w%d-3", w)), now, now)
	}
	if _, err := ts.LatestTopology(t.Context(), "orders"); err != nil {
		t.Errorf("LatestTopology after concurrent stores: %v", err)
	}
}

// testTopologyAliasing: a caller changing the data it stored, or the data
// it read, changes nothing stored.
func testTopologyAliasing(t *testing.T, f *fixture) {
	ts := f.topologies(t)
	a := topo("orders", "a")
	tp := a
	tp.Data = append([]byte(nil), a.Data...)
	f.putTopology(t, tp)
	for i := range tp.Data {
		tp.Data[i] = ' '
	}
	got, err := ts.Topology(t.Context(), a.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got.Data {
		got.Data[i] = ' '
	}
	now := f.clock.Now()
	f.wantTopology(t, "after the caller changed its slices", a, now, now)
}

// testTopologyCancelled: a PutTopology whose context is cancelled fails
// with context.Canceled and stores nothing.
func testTopologyCancelled(t *testing.T, f *fixture) {
	ts := f.topologies(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	a := topo("orders", "a")
	wantIs(t, "PutTopology with a cancelled context", ts.PutTopology(ctx, a), context.Canceled)
	_, err := ts.Topology(t.Context(), a.Fingerprint)
	wantIs(t, "Topology after a cancelled PutTopology", err, checkpoint.ErrNotFound)
}

// testTopologyThreads: topologies belong to the saver, not to a thread:
// deleting a thread (or every thread) leaves them, and they are no
// thread.
func testTopologyThreads(t *testing.T, f *fixture) {
	a := topo("orders", "a")
	f.putTopology(t, a)
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	if err := f.s.DeleteThread(t.Context(), "thread-1"); err != nil {
		t.Fatal(err)
	}
	now := f.clock.Now()
	f.wantTopology(t, "after DeleteThread", a, now, now)
	if tl, ok := f.s.(checkpoint.ThreadLister); ok {
		threads, err := tl.Threads(t.Context(), 0, 0)
		if err != nil || len(threads) != 0 {
			t.Errorf("Threads with only a topology stored = %v, %v; want none", threads, err)
		}
	}
	if _, err := f.s.Get(t.Context(), checkpoint.Ref{Thread: a.Fingerprint}, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Get of a thread named like the fingerprint: %v, want ErrNotFound", err)
	}
}

// testTopologyReopen: topologies, their times and the order of the stores
// survive a reopen, and stores go on in that order.
func testTopologyReopen(t *testing.T, f *fixture) {
	a, b := topo("orders", "a"), topo("orders", "b")
	first := f.clock.Now()
	f.putTopology(t, a)
	second := f.clock.Advance(time.Second)
	f.putTopology(t, b)
	f.reopen(t)
	f.wantTopology(t, "a after a reopen", a, first, first)
	f.wantTopology(t, "b after a reopen", b, second, second)
	f.wantNewest(t, "after a reopen", "orders", b)
	third := f.clock.Advance(time.Second)
	f.putTopology(t, a)
	f.wantNewest(t, "a stored again after a reopen", "orders", a)
	f.wantTopology(t, "a stored again after a reopen", a, first, third)
}
