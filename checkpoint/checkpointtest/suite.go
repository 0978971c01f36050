package checkpointtest

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Options tell Run how to make the saver under test.
type Options struct {
	// New returns a new, empty saver that reads the current time only from
	// now. It is called once per subtest, possibly from several goroutines
	// at once, and registers the saver's cleanup with t.Cleanup. It reports
	// its own failures with t.Fatal.
	New func(t *testing.T, now checkpoint.Clock) checkpoint.Saver

	// Reopen closes s and returns a saver over the same storage, as after
	// a process restart, reading time from the clock New gave s. Nil skips
	// the reopen cases.
	Reopen func(t *testing.T, s checkpoint.Saver) checkpoint.Saver
}

// Run runs the conformance suite against the savers opts makes, as
// subtests of t grouped by capability (see the package documentation).
// Groups for optional interfaces the saver does not implement, and reopen
// cases when opts.Reopen is nil, are skipped. Run fails t at once when
// opts.New is nil.
func Run(t *testing.T, opts Options) {
	t.Helper()
	if opts.New == nil {
		t.Fatal("checkpointtest.Run: Options.New is nil")
	}
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			if g.needs != "" {
				probe := opts.New(t, newClock().Now)
				if !g.has(probe) {
					t.Skipf("%T does not implement checkpoint.%s", probe, g.needs)
				}
			}
			if g.reopen && opts.Reopen == nil {
				t.Skip("Options.Reopen is nil")
			}
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if c.reopen && opts.Reopen == nil {
						t.Skip("Options.Reopen is nil")
					}
					t.Parallel()
					c.run(t, newFixture(t, opts))
				})
			}
		})
	}
}

// group is a set of cases for one capability.
type group struct {
	name   string
	needs  string                      // name of the optional interface the group needs, if any
	has    func(checkpoint.Saver) bool // reports whether the saver implements it
	reopen bool                        // every case needs Options.Reopen
	cases  []testCase
}

type testCase struct {
	name   string
	reopen bool // needs Options.Reopen
	run    func(t *testing.T, f *fixture)
}

func groups() []group {
	return []group{
		{name: "PutGet", cases: putGetCases()},
		{name: "Delta", cases: deltaCases()},
		{name: "PendingWrites", cases: writesCases()},
		{name: "SingleWriter", cases: singleWriterCases()},
		{name: "Leases", cases: leaseCases()},
		{name: "Concurrency", cases: concurrencyCases()},
		{name: "List", cases: listCases()},
		{name: "Namespaces", cases: namespaceCases()},
		{name: "DeleteThread", cases: deleteCases()},
		{name: "Validation", cases: validationCases()},
		{name: "Context", cases: contextCases()},
		{name: "Aliasing", cases: aliasingCases()},
		{name: "Reopen", reopen: true, cases: reopenCases()},
		{name: "Searcher", needs: "Searcher", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.Searcher); return ok }, cases: searcherCases()},
		{name: "ThreadLister", needs: "ThreadLister", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.ThreadLister); return ok }, cases: threadListerCases()},
		{name: "InterruptLister", needs: "InterruptLister", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.InterruptLister); return ok }, cases: interruptListerCases()},
		{name: "Pruner", needs: "Pruner", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.Pruner); return ok }, cases: prunerCases()},
		{name: "ChainPutter", needs: "ChainPutter", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.ChainPutter); return ok }, cases: chainCases()},
		{name: "LeaseInspector", needs: "LeaseInspector", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.LeaseInspector); return ok }, cases: leaseInspectorCases()},
		{name: "Vacuumer", needs: "Vacuumer", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.Vacuumer); return ok }, cases: vacuumerCases()},
		{name: "TopologyStore", needs: "TopologyStore", has: func(s checkpoint.Saver) bool { _, ok := s.(checkpoint.TopologyStore); return ok }, cases: topologyCases()},
		{name: "DueWork", needs: "DueWork and checkpoint.InputQueue", has: hasWork, cases: workCases()},
	}
}

// epoch is where every fake clock starts: whole seconds, so that savers
// storing milliseconds or microseconds keep times exact.
var epoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// clock is the fake clock the suite hands to savers. It only moves when a
// test advances it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: epoch} }

// Now returns the current fake time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and returns the new time.
func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// fixture is one case's saver with its clock and ID generator.
type fixture struct {
	opts  Options
	clock *clock
	ids   *checkpoint.IDGenerator
	s     checkpoint.Saver
}

func newFixture(t *testing.T, opts Options) *fixture {
	c := newClock()
	seed := [32]byte{'l', 'o', 'c', 'k', 's', 't', 'e', 'p'}
	return &fixture{
		opts:  opts,
		clock: c,
		ids:   checkpoint.NewIDGenerator(c.Now, rand.NewChaCha8(seed)),
		s:     opts.New(t, c.Now),
	}
}

// id returns a new checkpoint ID, greater than every ID the fixture made.
func (f *fixture) id() string { return f.ids.Next("") }

// reopen replaces the saver with a reopened one.
func (f *fixture) reopen(t *testing.T) {
	t.Helper()
	f.s = f.opts.Reopen(t, f.s)
	if f.s == nil {
		t.Fatal("Options.Reopen returned nil")
	}
}

func (f *fixture) get(t *testing.T, ref checkpoint.Ref, opts checkpoint.GetOptions) *checkpoint.Tuple {
	t.Helper()
	tp, err := f.s.Get(t.Context(), ref, opts)
	if err != nil {
		t.Fatalf("Get(%s): %v", ref, err)
	}
	if tp == nil {
		t.Fatalf("Get(%s) returned a nil tuple and no error", ref)
	}
	return tp
}

func (f *fixture) list(t *testing.T, thread string, opts checkpoint.ListOptions) []*checkpoint.Tuple {
	t.Helper()
	tps, err := f.s.List(t.Context(), thread, opts)
	if err != nil {
		t.Fatalf("List(%q, %+v): %v", thread, opts, err)
	}
	return tps
}

func (f *fixture) put(t *testing.T, req checkpoint.PutRequest) {
	t.Helper()
	if err := f.s.Put(t.Context(), req); err != nil {
		t.Fatalf("Put(%s parent %q): %v", refOf(req), req.Checkpoint.ParentID, err)
	}
}

func (f *fixture) putWrites(t *testing.T, ref checkpoint.Ref, lease checkpoint.Lease, tasks ...checkpoint.TaskWrites) {
	t.Helper()
	if err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: ref, Tasks: tasks, Lease: lease}); err != nil {
		t.Fatalf("PutWrites(%s): %v", ref, err)
	}
}

func (f *fixture) claim(t *testing.T, ref checkpoint.Ref, lease checkpoint.Lease) {
	t.Helper()
	if err := f.s.Claim(t.Context(), ref, lease); err != nil {
		t.Fatalf("Claim(%s, %q): %v", ref, lease.Owner, err)
	}
}

// pending returns the pending writes of a checkpoint as views.
func (f *fixture) pending(t *testing.T, ref checkpoint.Ref) []writeView {
	t.Helper()
	return mustPending(t, f.get(t, ref, checkpoint.GetOptions{}))
}

// headID returns the ID of the head of (thread, ns), or "" when Get says
// there is none.
func (f *fixture) headID(t *testing.T, thread, ns string) string {
	t.Helper()
	tp, err := f.s.Get(t.Context(), checkpoint.Ref{Thread: thread, NS: ns}, checkpoint.GetOptions{})
	if errors.Is(err, checkpoint.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("Get(head of %q ns %q): %v", thread, ns, err)
	}
	return tp.Checkpoint.ID
}

// threadDump is everything a reader can see of a thread: every checkpoint
// of every namespace with its values and pending writes, and the heads.
type threadDump struct {
	Heads  map[string]string
	Tuples []tupleDump
}

type tupleDump struct {
	View    tupleView
	Pending []writeView
}

// dump captures a thread so that a test can check that a refused request
// wrote nothing. The namespaces "" and "child:abc" always have a head entry.
func (f *fixture) dump(t *testing.T, thread string) threadDump {
	t.Helper()
	d := threadDump{Heads: map[string]string{}}
	nss := map[string]bool{"": true, "child:abc": true}
	for _, tp := range f.list(t, thread, checkpoint.ListOptions{AllNamespaces: true}) {
		d.Tuples = append(d.Tuples, tupleDump{View: mustView(t, tp, nil), Pending: mustPending(t, tp)})
		nss[tp.NS] = true
	}
	for ns := range nss {
		d.Heads[ns] = f.headID(t, thread, ns)
	}
	return d
}

// unchanged fails the test when the thread differs from before.
func (f *fixture) unchanged(t *testing.T, what, thread string, before threadDump) {
	t.Helper()
	if diff := cmp.Diff(before, f.dump(t, thread), cmpOpts...); diff != "" {
		t.Errorf("%s changed thread %q; it must write nothing (-before +after):\n%s", what, thread, diff)
	}
}

func refOf(req checkpoint.PutRequest) checkpoint.Ref {
	return checkpoint.Ref{Thread: req.Thread, NS: req.NS, ID: req.Checkpoint.ID}
}

// wantIs fails the test unless err matches one of targets.
func wantIs(t *testing.T, what string, err error, targets ...error) bool {
	t.Helper()
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	t.Errorf("%s: error = %v, want an error matching one of %v", what, err, targets)
	return false
}

// wantConflict fails the test unless err is a *checkpoint.ConflictError
// equal to want, matching checkpoint.ErrConflict.
func wantConflict(t *testing.T, what string, err error, want checkpoint.ConflictError) {
	t.Helper()
	var ce *checkpoint.ConflictError
	if !errors.As(err, &ce) {
		t.Errorf("%s: error = %v, want a *checkpoint.ConflictError", what, err)
		return
	}
	if !errors.Is(err, checkpoint.ErrConflict) {
		t.Errorf("%s: error %v does not match checkpoint.ErrConflict", what, err)
	}
	if diff := cmp.Diff(want, *ce); diff != "" {
		t.Errorf("%s: ConflictError mismatch (-want +got):\n%s", what, diff)
	}
}

// wantBusy fails the test unless err is a *checkpoint.BusyError equal to
// want (Until compared as an instant; Epoch only when want sets it: the
// Epochs cases pin it), matching checkpoint.ErrThreadBusy.
func wantBusy(t *testing.T, what string, err error, want checkpoint.BusyError) {
	t.Helper()
	var be *checkpoint.BusyError
	if !errors.As(err, &be) {
		t.Errorf("%s: error = %v, want a *checkpoint.BusyError", what, err)
		return
	}
	if !errors.Is(err, checkpoint.ErrThreadBusy) {
		t.Errorf("%s: error %v does not match checkpoint.ErrThreadBusy", what, err)
	}
	got := *be
	if want.Epoch == 0 {
		got.Epoch = 0
	}
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("%s: BusyError mismatch (-want +got):\n%s", what, diff)
	}
}

// lease returns a lease for owner with the suite's default TTL.
func lease(owner string) checkpoint.Lease { return checkpoint.Lease{Owner: owner, TTL: time.Minute} }
