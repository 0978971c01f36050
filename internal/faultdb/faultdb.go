package faultdb

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Op is a kind of database operation.
type Op int

// The operations a fault can target.
const (
	OpConnect  Op = iota + 1 // opening a connection
	OpBegin                  // driver Begin, or an Exec of BEGIN...
	OpExec                   // any other Exec
	OpQuery                  // a Query
	OpCommit                 // driver Commit, or an Exec of COMMIT/END
	OpRollback               // driver Rollback, or an Exec of ROLLBACK
)

// String returns the operation's name ("begin", "exec"...).
func (o Op) String() string {
	switch o {
	case OpConnect:
		return "connect"
	case OpBegin:
		return "begin"
	case OpExec:
		return "exec"
	case OpQuery:
		return "query"
	case OpCommit:
		return "commit"
	case OpRollback:
		return "rollback"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// When says whether a fault fires before the real operation (which then
// does not happen) or after it succeeded (the operation took effect, but the
// caller is told it failed: Temporal's ExecuteAndTimeout).
type When int

// The two positions of a fault.
const (
	Before When = iota
	After
)

// Mode says how long a fault lasts once it fired.
type Mode int

// The modes of a fault, as in SQLite's FAULTSIM.
const (
	// Transient faults fire once.
	Transient Mode = iota
	// Persistent faults fire at their Nth operation and at every matching
	// operation after it, until Reset.
	Persistent
)

// Fault describes one injected failure.
type Fault struct {
	Op Op
	// N is the matching operation it fires at, counted from 1 since Arm.
	// Zero means 1.
	N    int
	When When
	Mode Mode
	// Err is returned when the fault fires. Nil means only Delay and Action
	// apply and the operation proceeds normally.
	Err error
	// Match, when not empty, restricts the fault to operations whose SQL
	// text contains it (case-insensitive). Begin, Commit and Rollback
	// issued through the driver API have the SQL text "BEGIN", "COMMIT"
	// and "ROLLBACK".
	Match string
	// Delay is slept before the fault takes effect.
	Delay time.Duration
	// Action is called when the fault fires, before Err is returned (a
	// crash test kills the process here).
	Action func()
}

type armed struct {
	Fault
	seen  int
	fired bool
}

// Event records one fired fault.
type Event struct {
	Op    Op
	When  When
	Query string
	Err   error
}

// Driver wraps a base driver with a fault schedule.
type Driver struct {
	base driver.Driver

	mu     sync.Mutex
	faults []*armed
	counts map[Op]int
	random *randomFaults
	events []Event
}

type randomFaults struct {
	rng  *rand.Rand
	rate float64
	ops  map[Op]bool
	errs []error
	when When
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.DriverContext = (*Driver)(nil)
)

// New returns a Driver that passes every operation to base until faults
// are armed.
func New(base driver.Driver) *Driver {
	return &Driver{base: base, counts: map[Op]int{}}
}

// Arm adds a fault to the schedule. Its operation count starts now.
func (d *Driver) Arm(f Fault) {
	if f.N <= 0 {
		f.N = 1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, &armed{Fault: f})
}

// ArmRandom makes every operation of the given kinds fail with probability
// rate, with an error drawn from errs, before or after the real operation,
// from a PRNG seeded with seed: the same seed and the same sequence of
// operations fail the same way. Random faults are transient.
func (d *Driver) ArmRandom(seed uint64, rate float64, when When, ops []Op, errs ...error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	set := map[Op]bool{}
	for _, o := range ops {
		set[o] = true
	}
	d.random = &randomFaults{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rate: rate, ops: set, errs: errs, when: when}
}

// Reset removes every fault and clears counts and events.
func (d *Driver) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults, d.random, d.events = nil, nil, nil
	d.counts = map[Op]int{}
}

// Count returns how many operations of kind op ran since the last Reset.
func (d *Driver) Count(op Op) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[op]
}

// Events returns the faults that fired since the last Reset, in order.
func (d *Driver) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Event(nil), d.events...)
}

// decision is what the schedule says about one operation.
type decision struct {
	before, after *firing
}

type firing struct {
	err    error
	delay  time.Duration
	action func()
}

func (f *firing) apply() error {
	if f == nil {
		return nil
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if f.action != nil {
		f.action()
	}
	return f.err
}

// check counts one operation and returns the faults that fire on it.
func (d *Driver) check(op Op, query string) decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[op]++
	var dec decision
	set := func(w When, f *firing, ev Event) {
		if w == After {
			if dec.after == nil {
				dec.after = f
			}
		} else if dec.before == nil {
			dec.before = f
		}
		d.events = append(d.events, ev)
	}
	for _, a := range d.faults {
		if a.Op != op || (a.Match != "" && !containsFold(query, a.Match)) {
			continue
		}
		if a.fired && a.Mode == Transient {
			continue
		}
		a.seen++
		if a.seen < a.N {
			continue
		}
		a.fired = true
		set(a.When, &firing{err: a.Err, delay: a.Delay, action: a.Action}, Event{Op: op, When: a.When, Query: query, Err: a.Err})
	}
	if r := d.random; r != nil && r.ops[op] && len(r.errs) > 0 && r.rng.Float64() < r.rate {
		err := r.errs[r.rng.IntN(len(r.errs))]
		set(r.when, &firing{err: err}, Event{Op: op, When: r.when, Query: query, Err: err})
	}
	return dec
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToUpper(s), strings.ToUpper(sub))
}

// classify maps SQL text to the operation it performs.
func classify(query string, fallback Op) Op {
	q := strings.TrimSpace(query)
	word := q
	if i := strings.IndexAny(q, " \t\r\n;"); i >= 0 {
		word = q[:i]
	}
	switch strings.ToUpper(word) {
	case "BEGIN":
		return OpBegin
	case "COMMIT", "END":
		return OpCommit
	case "ROLLBACK":
		if !containsFold(q, " TO ") {
			return OpRollback
		}
	}
	return fallback
}

// Open implements driver.Driver. It returns the fault armed for the
// OpConnect that fires (before or after the real open), or the wrapped
// driver's error.
func (d *Driver) Open(name string) (driver.Conn, error) {
	return d.connect(context.Background(), func(context.Context) (driver.Conn, error) { return d.base.Open(name) })
}

// OpenConnector implements driver.DriverContext. It returns the wrapped
// driver's OpenConnector error; faults armed for OpConnect fire when the
// connector connects.
func (d *Driver) OpenConnector(name string) (driver.Connector, error) {
	if dc, ok := d.base.(driver.DriverContext); ok {
		c, err := dc.OpenConnector(name)
		if err != nil {
			return nil, err
		}
		return &connector{d: d, open: c.Connect, closer: c}, nil
	}
	return &connector{d: d, open: func(context.Context) (driver.Conn, error) { return d.base.Open(name) }}, nil
}

func (d *Driver) connect(ctx context.Context, open func(context.Context) (driver.Conn, error)) (driver.Conn, error) {
	dec := d.check(OpConnect, "")
	if err := dec.before.apply(); err != nil {
		return nil, err
	}
	c, err := open(ctx)
	if err != nil {
		return nil, err
	}
	if err := dec.after.apply(); err != nil {
		c.Close()
		return nil, err
	}
	return &conn{d: d, c: c}, nil
}

type connector struct {
	d      *Driver
	open   func(context.Context) (driver.Conn, error)
	closer any
}

// Connect opens a wrapped connection, counting it as OpConnect.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	return c.d.connect(ctx, c.open)
}

// Driver returns the fault driver.
func (c *connector) Driver() driver.Driver { return c.d }

// Close closes the base connector when it has a Close method.
func (c *connector) Close() error {
	if cl, ok := c.closer.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// conn wraps a driver connection.
type conn struct {
	d *Driver
	c driver.Conn
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var s driver.Stmt
	var err error
	if pc, ok := c.c.(driver.ConnPrepareContext); ok {
		s, err = pc.PrepareContext(ctx, query)
	} else {
		s, err = c.c.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &stmt{d: c.d, s: s, query: query}, nil
}

func (c *conn) Close() error { return c.c.Close() }

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	dec := c.d.check(OpBegin, "BEGIN")
	if err := dec.before.apply(); err != nil {
		return nil, err
	}
	var tx driver.Tx
	var err error
	if bt, ok := c.c.(driver.ConnBeginTx); ok {
		tx, err = bt.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 fallback for base drivers without ConnBeginTx
		tx, err = c.c.Begin()
	}
	if err != nil {
		return nil, err
	}
	if err := dec.after.apply(); err != nil {
		// The transaction is open on the base connection; the caller
		// believes it is not, so end it.
		tx.Rollback()
		return nil, err
	}
	return &tx2{d: c.d, tx: tx}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := c.c.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	dec := c.d.check(classify(query, OpExec), query)
	if err := dec.before.apply(); err != nil {
		return nil, err
	}
	res, err := ex.ExecContext(ctx, query, args)
	if err != nil {
		return nil, err
	}
	if err := dec.after.apply(); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.c.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	dec := c.d.check(classify(query, OpQuery), query)
	if err := dec.before.apply(); err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		return nil, err
	}
	if err := dec.after.apply(); err != nil {
		rows.Close()
		return nil, err
	}
	return rows, nil
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.c.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.c.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// Raw returns the base driver connection, for code that needs its
// driver-specific methods.
func (c *conn) Raw() driver.Conn { return c.c }

// tx2 wraps a driver transaction.
type tx2 struct {
	d  *Driver
	tx driver.Tx
}

func (t *tx2) Commit() error {
	dec := t.d.check(OpCommit, "COMMIT")
	if err := dec.before.apply(); err != nil {
		return err
	}
	if err := t.tx.Commit(); err != nil {
		return err
	}
	return dec.after.apply()
}

func (t *tx2) Rollback() error {
	dec := t.d.check(OpRollback, "ROLLBACK")
	if err := dec.before.apply(); err != nil {
		return err
	}
	if err := t.tx.Rollback(); err != nil {
		return err
	}
	return dec.after.apply()
}

// stmt wraps a prepared statement.
type stmt struct {
	d     *Driver
	s     driver.Stmt
	query string
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

func (s *stmt) Close() error  { return s.s.Close() }
func (s *stmt) NumInput() int { return s.s.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), namedValues(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), namedValues(args))
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	dec := s.d.check(classify(s.query, OpExec), s.query)
	if err := dec.before.apply(); err != nil {
		return nil, err
	}
	var res driver.Result
	var err error
	if ec, ok := s.s.(driver.StmtExecContext); ok {
		res, err = ec.ExecContext(ctx, args)
	} else {
		var vals []driver.Value
		if vals, err = plainValues(args); err == nil {
			//lint:ignore SA1019 fallback for base drivers without StmtExecContext
			res, err = s.s.Exec(vals)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := dec.after.apply(); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	dec := s.d.check(classify(s.query, OpQuery), s.query)
	if err := dec.before.apply(); err != nil {
		return nil, err
	}
	var rows driver.Rows
	var err error
	if qc, ok := s.s.(driver.StmtQueryContext); ok {
		rows, err = qc.QueryContext(ctx, args)
	} else {
		var vals []driver.Value
		if vals, err = plainValues(args); err == nil {
			//lint:ignore SA1019 fallback for base drivers without StmtQueryContext
			rows, err = s.s.Query(vals)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := dec.after.apply(); err != nil {
		rows.Close()
		return nil, err
	}
	return rows, nil
}

func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.s.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func namedValues(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, v := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out
}

var errNamedArgs = errors.New("faultdb: the base driver does not support named arguments")

func plainValues(args []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errNamedArgs
		}
		out[i] = a.Value
	}
	return out, nil
}
