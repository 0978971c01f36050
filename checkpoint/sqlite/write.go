package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// threadRow is the lease part of a threads row. A thread's lease is the
// row of its root namespace (checkpoint_ns ”), whatever the namespace of
// the request: every namespace of a thread shares one lease
// (checkpoint.Saver), so the other namespaces have no row.
type threadRow struct {
	exists bool
	owner  string
	until  int64
	runner string
	epoch  int64
}

const selectThread = `SELECT lease_owner, lease_until, lease_runner, lease_epoch FROM threads WHERE thread_id = ? AND checkpoint_ns = ''`

// thread reads the thread's lease row.
func (t *wtx) thread(thread string) (threadRow, error) {
	var owner, runner sql.NullString
	var until sql.NullInt64
	var epoch int64
	err := t.queryRow(selectThread, thread).Scan(&owner, &until, &runner, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return threadRow{}, nil
	}
	if err != nil {
		return threadRow{}, err
	}
	return threadRow{exists: true, owner: owner.String, until: until.Int64, runner: runner.String, epoch: epoch}, nil
}

// busy returns the *checkpoint.BusyError of a request with lease l when
// another owner holds the row's live lease (and l does not take it back),
// nil otherwise: the lease rule of package checkpoint.
func (r threadRow) busy(thread, ns string, l checkpoint.Lease, now time.Time) error {
	if l.Held && r.owner != l.Owner {
		// Fenced (D17): the lease passed on since this owner took it.
		return r.busyError(thread, ns, l)
	}
	if r.owner != "" && r.owner != l.Owner && now.UnixNano() < r.until && !l.TakesBack(r.owner, r.runner) {
		return r.busyError(thread, ns, l)
	}
	return nil
}

// busyError describes the row's lease to a request l it refused.
func (r threadRow) busyError(thread, ns string, l checkpoint.Lease) *checkpoint.BusyError {
	e := &checkpoint.BusyError{Thread: thread, NS: ns, Owner: r.owner, Runner: r.runner, Epoch: uint64(r.epoch),
		SameRunner: r.owner != "" && l.Runner != "" && l.Runner == r.runner}
	if r.owner != "" {
		e.Until = time.Unix(0, r.until).UTC()
	}
	return e
}

// held reports whether owner holds the row's lease and it is live.
func (r threadRow) held(owner string, now time.Time) bool {
	return r.exists && r.owner == owner && now.UnixNano() < r.until
}

// headOf is the head of the thread ?1 and namespace ?2: its largest
// checkpoint ID, one seek on the primary key (NULL when it has none).
//
// The CASTs keep the statement prepared: SQLite marks a statement whose
// plan may depend on a bound value (here: an ORDER BY or min/max over an
// index whose prefix is bound) to be re-prepared when that value is
// rebound, and go-sqlite3 clears every binding before each execution, so
// without them each execution would parse and plan the statement again
// (measured: +3 µs on this query, +25 µs on a Put). An expression that is
// not a bare parameter is not tracked that way; the index is used all the
// same.
const headOf = `(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = CAST(?1 AS TEXT) AND checkpoint_ns = CAST(?2 AS TEXT))`

const selectHead = `SELECT ` + headOf

// head returns the thread's head: its largest checkpoint ID ("" for none).
func (t *wtx) head(thread, ns string) (string, error) {
	var head sql.NullString
	err := t.queryRow(selectHead, thread, ns).Scan(&head)
	return head.String, err
}

const checkpointStep = `SELECT step FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND pruned = 0`

// step returns the step of checkpoint id, and whether it exists.
func (t *wtx) step(thread, ns, id string) (int, bool, error) {
	var step int64
	err := t.queryRow(checkpointStep, thread, ns, id).Scan(&step)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return int(step), err == nil, err
}

// savedInterrupts lists the interrupts saved on checkpoint id, by task:
// its __interrupt__ rows of the writes table and, with children set, the
// __interrupt__ writes among its children's task writes.
const (
	savedInterrupts = `SELECT task_id, value FROM writes
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 AND channel = '` + checkpoint.ChannelInterrupt + `'`
	childInterrupts = `SELECT t.value ->> 'task_id', w.value -> 1 FROM checkpoints c, json_each(c.task_writes) t, json_each(t.value, '$.writes') w
WHERE c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id > ?3 AND c.parent_checkpoint_id = ?3 AND c.pruned = 0
	AND json_valid(c.task_writes) AND w.value ->> 0 = '` + checkpoint.ChannelInterrupt + `'`
)

// interruptIDs returns the interrupt IDs saved on checkpoint id (see
// savedInterrupts), by the task that raised them, for
// checkpoint.CheckInterruptIDs. A value that does not decode is left out:
// reading the checkpoint reports it.
func (t *wtx) interruptIDs(thread, ns, id string, children bool) (map[string]string, error) {
	ids := map[string]string{}
	queries := []string{savedInterrupts}
	if children {
		queries = append(queries, childInterrupts)
	}
	for _, q := range queries {
		rows, err := t.s.wconn.QueryContext(t.ctx, q, thread, ns, id)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var task, value sql.NullString
			if err := rows.Scan(&task, &value); err != nil {
				rows.Close()
				return nil, err
			}
			list, _ := checkpoint.DecodeInterrupts([]byte(value.String))
			for _, in := range list {
				ids[in.ID] = task.String
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// checkInterrupts refuses (checkpoint.CheckInterruptIDs) interrupt writes
// of tasks that raise an ID another task saved on checkpoint id.
func (t *wtx) checkInterrupts(thread, ns, id string, children bool, tasks []checkpoint.TaskWrites) error {
	if !checkpoint.HasInterruptWrite(tasks) {
		return nil
	}
	ids, err := t.interruptIDs(thread, ns, id, children)
	if err != nil {
		return err
	}
	if err := checkpoint.CheckInterruptIDs(ids, tasks); err != nil {
		return errRollback{fmt.Errorf("thread %q checkpoint %q: %w", thread, id, err)}
	}
	return nil
}

// The writes of a thread's (lease) row.
const (
	insertThread = `INSERT INTO threads (thread_id, checkpoint_ns, lease_owner, lease_until, updated_at, lease_runner, lease_epoch) VALUES (?1, '', ?2, ?3, ?4, ?5, ?6)`
	takeLease    = `UPDATE threads SET lease_owner = ?2, lease_until = ?3, updated_at = coalesce(?4, updated_at), lease_runner = ?5, lease_epoch = ?6 WHERE thread_id = ?1 AND checkpoint_ns = ''`
)

// setLease writes the thread's row for a request that passed the lease
// rule: release drops the lease, a live lease of the same owner is kept as
// it is (only Claim, renew, extends it), a free or expired one, or one
// taken back, is taken until now + TTL. The epoch grows whenever the lease
// passes to an owner that did not hold it, released at once or not.
// updated is the time recorded as updated_at (nil keeps it: Claim and
// Release do not count as updates). The row is the thread's, whatever
// namespace the request writes.
func (t *wtx) setLease(thread string, row threadRow, l checkpoint.Lease, now time.Time, release, renew bool, updated any) error {
	var owner, until, runner any
	epoch := row.epoch
	if row.owner != l.Owner {
		epoch++
	}
	switch {
	case release:
	case row.held(l.Owner, now) && !renew:
		owner, until, runner = row.owner, row.until, nullable(row.runner)
	default:
		owner, until, runner = l.Owner, now.Add(l.TTL).UnixNano(), nullable(l.Runner)
	}
	var err error
	if row.exists {
		_, err = t.exec(takeLease, thread, owner, until, updated, runner, epoch)
	} else {
		_, err = t.exec(insertThread, thread, owner, until, updated, runner, epoch)
	}
	return err
}

// putRow is a checkpoints row ready to insert. Its text columns are
// substrings of one string: the row as rowCRC reads it, every part
// followed by a NUL byte.
type putRow struct {
	parent                       any // nil for the first checkpoint
	step                         int64
	source, created              string
	metadata, versions, channels string
	taskWrites                   any // nil when no task wrote it
	crc                          int64
	links                        string // the links column (see linksSchema)
}

// encodeRow builds the row of a Put: the checkpoint, the blobs of the
// channels it changed and the task writes that produced it, encoded into
// one buffer in rowCRC's order, so that the checksum is one pass and the
// column values one allocation.
func encodeRow(req *checkpoint.PutRequest, now time.Time) (putRow, error) {
	cp := &req.Checkpoint
	invalid := func(what string, err error) error {
		if errors.Is(err, checkpoint.ErrInvalid) {
			return fmt.Errorf("checkpoint %q: %s: %w", cp.ID, what, err)
		}
		return fmt.Errorf("%w: checkpoint %q: %s: %v", checkpoint.ErrInvalid, cp.ID, what, err)
	}
	size := 256 + len(req.Thread) + len(req.NS) + 2*len(cp.ID) + len(cp.Mark) + len(cp.Metadata.RunID) + 64*len(cp.Versions)
	for _, bs := range cp.Channels {
		size += 48 + len(bs[0].Data) + len(bs[0].Base)
	}
	if cp.ParentID != "" {
		for _, tw := range req.ParentWrites {
			size += 64 + len(tw.TaskID) + len(tw.Node) + len(tw.Path)
			for _, w := range tw.Writes {
				size += 8 + len(w.Channel)
				if !sameAsChannel(cp.Channels, w) { // otherwise stored once, in channels
					size += len(w.Value)
				}
			}
		}
	}
	b := make([]byte, 0, size)
	var at [14]int // where each part starts; at[k+1]-1 is where it ends
	k := 0
	next := func() {
		b = append(b, 0)
		k++
		at[k] = len(b)
	}
	created := cp.CreatedAt
	if created.IsZero() {
		created = now
	}
	var err error
	b = append(b, req.Thread...)
	next()
	b = append(b, req.NS...)
	next()
	b = append(b, cp.ID...)
	next()
	b = append(b, cp.ParentID...)
	next()
	b = strconv.AppendInt(b, int64(cp.Metadata.Step), 10)
	next()
	b = append(b, cp.Metadata.Source...)
	next() // 6: created
	b = appendTime(b, created)
	next() // 7: metadata
	if b, err = appendMetadata(b, cp.Metadata); err != nil {
		return putRow{}, invalid("metadata", err)
	}
	next() // 8: versions
	if cp.Versions == nil {
		b = append(b, "null"...)
	} else if b, err = encodeVersions(b, cp.Versions); err != nil {
		return putRow{}, invalid("versions", err)
	}
	next() // 9: channels
	if b, err = encodeChannels(b, cp.Channels); err != nil {
		return putRow{}, invalid("channels", err)
	}
	next() // 10: task writes
	if cp.ParentID != "" {
		if b, err = encodeTaskWrites(b, req.ParentWrites, cp.Channels); err != nil {
			return putRow{}, invalid("parent writes", err)
		}
	}
	next() // 11: mark
	b = append(b, cp.Mark...)
	next() // 12: pruned
	b = append(b, '0')
	next()
	// The columns are substrings of b, which nothing writes again: share
	// its bytes rather than copy a row that may be megabytes.
	all := unsafe.String(unsafe.SliceData(b), len(b))
	col := func(i int) string { return all[at[i] : at[i+1]-1] }
	r := putRow{step: int64(cp.Metadata.Step), source: col(5), created: col(6), metadata: col(7), versions: col(8), channels: col(9),
		crc: int64(crc32.Checksum(b, castagnoli))}
	if cp.ParentID != "" {
		r.parent = cp.ParentID
	}
	if tw := col(10); tw != "" {
		r.taskWrites = tw
	}
	r.links = encodeLinks(cp.Channels)
	return r, nil
}

// appendMetadata appends the flat metadata object. The usual metadata (no
// caller keys) is written directly, with sorted keys as json.Marshal
// writes them; anything else goes through Metadata.MarshalJSON.
func appendMetadata(b []byte, m checkpoint.Metadata) ([]byte, error) {
	marshal := func() ([]byte, error) {
		j, err := json.Marshal(m)
		return append(b, j...), err
	}
	if len(m.Extra) > 0 || m.RunKey != "" || !utf8.ValidString(string(m.Source)) || !utf8.ValidString(m.RunID) || !utf8.ValidString(m.Topology) || !utf8.ValidString(m.Durability) {
		return marshal()
	}
	b = append(b, '{')
	if m.Durability != "" {
		b = append(b, `"`+checkpoint.DurabilityFilter+`":`...)
		b = appendString(b, m.Durability)
		b = append(b, ',')
	}
	b = append(b, `"parents":{`...)
	var stack [8]string
	for i, k := range appendSortedKeys(stack[:0], m.Parents) {
		v := m.Parents[k]
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return marshal()
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, v)
	}
	b = append(b, '}')
	if m.RunID != "" {
		b = append(b, `,"run_id":`...)
		b = appendString(b, m.RunID)
	}
	b = append(b, `,"source":`...)
	b = appendString(b, string(m.Source))
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(m.Step), 10)
	if m.Topology != "" {
		b = append(b, `,"`+checkpoint.TopologyFilter+`":`...)
		b = appendString(b, m.Topology)
	}
	return append(b, '}'), nil
}

// writeCRC is the checksum of a writes row (schema 4): the CRC-32C of
// its key (thread, namespace, checkpoint, task, index) and of everything
// it holds (channel, node, path, value), each part followed by a NUL
// byte, so that a row copied to another thread, checkpoint, task or index
// does not verify there. created_at is left out: a special write saved
// again keeps its row's time, which the writer does not read.
func writeCRC(thread, ns, cpID, task string, idx int, channel, node, path string, value []byte) int64 {
	var c uint32
	var num [24]byte
	c = crcPart(c, thread)
	c = crcPart(c, ns)
	c = crcPart(c, cpID)
	c = crcPart(c, task)
	c = crcBytes(c, strconv.AppendInt(num[:0], int64(idx), 10))
	c = crcPart(c, channel)
	c = crcPart(c, node)
	c = crcPart(c, path)
	c = crcBytes(c, value)
	return int64(c)
}

// writeRow is one writes row to insert.
type writeRow struct {
	checkpoint string
	task       string
	idx        int
	channel    string
	value      []byte
	node, path string
	special    bool
}

func writeRows(dst []writeRow, cpID string, tasks []checkpoint.TaskWrites) []writeRow {
	for _, tw := range tasks {
		for pos, w := range tw.Writes {
			dst = append(dst, writeRow{
				checkpoint: cpID, task: tw.TaskID, idx: checkpoint.WriteIndex(w.Channel, pos),
				channel: w.Channel, value: w.Value, node: tw.Node, path: tw.Path,
				special: checkpoint.IsSpecial(w.Channel),
			})
		}
	}
	return dst
}

// maxRowsPerInsert bounds a multi-row INSERT (11 parameters a row, far
// below SQLite's limit of 32766).
const maxRowsPerInsert = 32

// multiInsert returns "<head> VALUES (?,...),(?,...)<tail>" for n rows of
// cols columns. The text is a key of the writer's statement cache.
func multiInsert(head string, cols, n int, tail string) string {
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 8 + n*(2*cols+2))
	b.WriteString(head)
	b.WriteString(" VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := 0; j < cols; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
		}
		b.WriteByte(')')
	}
	b.WriteString(tail)
	return b.String()
}

const (
	// Regular writes are insert-if-absent, special ones replace the
	// value in place: the row keeps its rowid and created_at, which order
	// pending interrupts, so that a page cursor never sees a write saved
	// again as a new one (INSERT OR REPLACE would delete and re-insert).
	writesHead        = `INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)`
	writesTailRegular = ` ON CONFLICT DO NOTHING`
	writesTailSpecial = ` ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
	channel = excluded.channel, value = excluded.value, node = excluded.node, path = excluded.path, crc = excluded.crc`
)

// insertWrites saves rows in order, with the time created returns.
// Consecutive rows of the same kind go in one statement; a regular row is
// ignored when its (task, index) exists, a special one replaces it,
// exactly as if the rows were saved one by one.
func (t *wtx) insertWrites(thread, ns string, rows []writeRow, created func() string) error {
	for len(rows) > 0 {
		n := 1
		for n < len(rows) && n < maxRowsPerInsert && rows[n].special == rows[0].special {
			n++
		}
		args := make([]any, 0, 11*n)
		for _, r := range rows[:n] {
			args = append(args, thread, ns, r.checkpoint, r.task, r.idx, r.channel, string(r.value), r.node, r.path, created(),
				writeCRC(thread, ns, r.checkpoint, r.task, r.idx, r.channel, r.node, r.path, r.value))
		}
		tail := writesTailRegular
		if rows[0].special {
			tail = writesTailSpecial
		}
		q := multiInsert(writesHead, 11, n, tail)
		if _, err := t.exec(q, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// putQueries are putFast, putNew and putInsert for a file with the links
// column (linksSchema), which they write as ?16 (preparedPut.args), and
// without it.
type putQueries struct{ fast, new, insert string }

var (
	putLinks   = withLinks(putQueries{putFast, putNew, putInsert})
	putNoLinks = putQueries{putFast, putNew, putInsert}
)

// withLinks returns q inserting the links column too, ?16.
func withLinks(q putQueries) putQueries {
	add := func(stmt string) string {
		cols := strings.Replace(stmt, ", crc)", ", crc, links)", 1)
		return cols[:strings.LastIndexByte(cols, ')')] + ", ?16)"
	}
	return putQueries{add(q.fast), add(q.new), add(q.insert)}
}

// queries returns the statements a Put runs on the saver's file.
func (s *Saver) putQueries() (q putQueries, args int) {
	if s.version >= linksSchema {
		return putLinks, 16
	}
	return putNoLinks, 13
}

const (
	insertColumns = `INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, versions, channels, task_writes, mark, crc)`
	// putFast is a whole steady-state Put, one INSERT: its crc is NULL,
	// and the NOT NULL constraint refuses the row (writing nothing), unless
	// the parent ?4 is the head of namespace ?2, its step is below the new
	// one's ?5, and owner ?14 holds the thread's live lease at ?15.
	// (INSERT ... SELECT ... WHERE would say the same with a row count, but
	// SQLite runs an INSERT whose SELECT reads the target table through an
	// ephemeral table: +7 µs a Put, measured.)
	putFast = insertColumns + `
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, CASE WHEN ` + headOf + ` = ?4
	AND (SELECT step FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?4) < ?5
	AND EXISTS (SELECT 1 FROM threads WHERE thread_id = ?1 AND checkpoint_ns = '' AND lease_owner = ?14 AND lease_until > ?15)
	THEN ?13 END)`
	// putNew is the first Put of a thread, in the same way: the row is
	// refused unless the namespace has no checkpoint and the thread no
	// threads row (then no lease applies; the caller inserts the row).
	// The first Put of a subgraph's namespace, whose thread has its row,
	// takes the general path.
	putNew = insertColumns + `
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, CASE WHEN ` + headOf + ` IS NULL
	AND NOT EXISTS (SELECT 1 FROM threads WHERE thread_id = ?1 AND checkpoint_ns = '')
	THEN ?13 END)`
	putInsert = insertColumns + ` VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)`
)

// Put implements checkpoint.Saver. A Put is one row: the checkpoint, the
// data of the channels it changed and req.ParentWrites (the writes of the
// tasks that produced it, pending writes of its parent), inserted in one
// IMMEDIATE transaction; req.Writes (rare: a breakpoint marker) go to the
// writes table in the same transaction. The head of a thread is its
// largest checkpoint ID, so a Put whose parent is the head and whose owner
// holds a live lease is a single INSERT that checks both (putFast), and
// the first Put of a new thread an INSERT that checks that the thread is
// new, followed by the thread's row; the thread's row is otherwise written
// only when the lease is taken, taken over or released. When the INSERT is
// refused, the same transaction reads the thread and decides as package
// checkpoint says: a
// *checkpoint.BusyError when another owner holds a live lease, a
// *checkpoint.ConflictError when the parent is not the head (or, with
// req.Fork, does not exist), when the ID is taken, or when a fork's ID does
// not sort after the head (it could not become the head); otherwise the
// lease is taken and the row inserted. It returns an error wrapping
// checkpoint.ErrInvalid for a malformed request and a *StoreError when
// SQLite fails (ErrStoreBusy: retry; ErrCommitIndeterminate: re-read the
// head). Nothing is written on any error but an indeterminate commit.
func (s *Saver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if err := checkpoint.ValidatePut(&req); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	now := s.cfg.now()
	p, err := preparePut(&req, now)
	if err != nil {
		return err
	}
	op := opInfo{op: "put", thread: req.Thread, ns: req.NS, checkpoint: req.Checkpoint.ID}
	return s.writeGroupedFirst(ctx, op, "sqlite.put", p.size(), p.firstOnly() && len(req.Joins) == 0, func(t *wtx) error {
		t.savedPut = p
		if err := t.put(p); err != nil {
			return err
		}
		return t.join(req.Joins)
	})
}

// PutChain implements checkpoint.ChainPutter: every request is inserted as
// Put inserts it, in one IMMEDIATE transaction, so that all of them are
// saved or none. It returns an error wrapping checkpoint.ErrInvalid when
// reqs are not a chain (checkpoint.ValidateChain) and otherwise what Put
// returns for the request that could not be saved; nothing is written on
// any error but an indeterminate commit.
func (s *Saver) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	if err := checkpoint.ValidateChain(reqs); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	now := s.cfg.now()
	ps := make([]*preparedPut, len(reqs))
	for i := range reqs {
		p, err := preparePut(&reqs[i], now)
		if err != nil {
			return err
		}
		ps[i] = p
	}
	last := &reqs[len(reqs)-1]
	op := opInfo{op: "put", thread: last.Thread, ns: last.NS, checkpoint: last.Checkpoint.ID}
	size := 0
	for _, p := range ps {
		size += p.size()
	}
	firstOnly := len(ps) == 1 && ps[0].firstOnly() && len(reqs[0].Joins) == 0
	return s.writeGroupedFirst(ctx, op, "sqlite.put", size, firstOnly, func(t *wtx) error {
		t.savedPut = ps[len(ps)-1]
		for _, p := range ps {
			if err := t.put(p); err != nil {
				return err
			}
		}
		for i := range reqs {
			if err := t.join(reqs[i].Joins); err != nil {
				return err
			}
		}
		return nil
	})
}

// preparedPut is a Put's request encoded for its statements.
type preparedPut struct {
	req    *checkpoint.PutRequest
	now    time.Time
	row    putRow
	writes []writeRow
	args   [16]any
}

func preparePut(req *checkpoint.PutRequest, now time.Time) (*preparedPut, error) {
	cp := &req.Checkpoint
	row, err := encodeRow(req, now)
	if err != nil {
		return nil, err
	}
	p := &preparedPut{req: req, now: now, row: row}
	if len(req.Writes) > 0 {
		p.writes = writeRows(nil, cp.ID, req.Writes)
	}
	p.args = [...]any{req.Thread, req.NS, cp.ID, row.parent, row.step, row.source, row.created, row.metadata, row.versions, row.channels, row.taskWrites, cp.Mark, row.crc,
		req.Lease.Owner, now.UnixNano(), row.links}
	return p, nil
}

// firstOnly reports whether the Put cannot be refused once its first
// write statement wrote (writeGroupedFirst): that statement is the
// row's INSERT that checks the parent and lease itself (putFast, putNew),
// after which only rows that cannot be refused are written, unless its
// task writes raise interrupts (checkParentInterrupts reads them after
// the INSERT).
func (p *preparedPut) firstOnly() bool {
	return !checkpoint.HasInterruptWrite(p.req.ParentWrites)
}

// size is about how many bytes the Put writes (Config.GroupCommitBytes).
func (p *preparedPut) size() int {
	n := 256 + len(p.row.metadata) + len(p.row.versions) + len(p.row.channels)
	if tw, ok := p.row.taskWrites.(string); ok {
		n += len(tw)
	}
	return n + rowsSize(p.writes)
}

// rowsSize is about how many bytes rows write.
func rowsSize(rows []writeRow) int {
	n := 0
	for _, r := range rows {
		n += 64 + len(r.value)
	}
	return n
}

// put inserts one prepared Put in the open transaction.
func (t *wtx) put(p *preparedPut) error {
	req, cp, now, args := p.req, &p.req.Checkpoint, p.now, p.args[:]
	nowText := func() string { return formatTime(now) } // only a write of the threads row needs it
	q, nargs := t.s.putQueries()
	if nargs < len(args) {
		args = args[:15] // putFast without the links column
	}
	if cp.ParentID != "" {
		_, err := t.execFirst(q.fast, args...)
		if err != nil && !isConstraint(err) {
			return err
		}
		if err == nil {
			switch {
			case req.Release:
				if _, err := t.exec(releaseLease, req.Thread, nowText()); err != nil {
					return err
				}
			case req.NS != "":
				// A subgraph's step is an update of the thread: its root
				// head does not say so.
				if _, err := t.exec(touchThread, req.Thread, nowText()); err != nil {
					return err
				}
			}
			if err := t.checkParentInterrupts(req); err != nil {
				return err
			}
			return t.insertWrites(req.Thread, req.NS, p.writes, nowText)
		}
	} else if !req.Lease.Held {
		// A new thread: the row, then the threads row with the lease.
		_, err := t.execFirst(q.new, args[:nargs]...)
		if err != nil && !isConstraint(err) {
			return err
		}
		if err == nil {
			if err := t.setLease(req.Thread, threadRow{}, req.Lease, now, req.Release, false, nowText()); err != nil {
				return err
			}
			return t.insertWrites(req.Thread, req.NS, p.writes, nowText)
		}
	}
	th, err := t.thread(req.Thread)
	if err != nil {
		return err
	}
	if th.exists {
		if err := th.busy(req.Thread, req.NS, req.Lease, now); err != nil {
			return errRollback{err}
		}
	}
	head, err := t.head(req.Thread, req.NS)
	if err != nil {
		return err
	}
	if !th.exists && req.Lease.Held {
		// The run held a lease on a thread that is gone (deleted).
		return errRollback{&checkpoint.ConflictError{Thread: req.Thread, NS: req.NS, Expected: cp.ParentID, Head: head}}
	}
	conflict := errRollback{&checkpoint.ConflictError{Thread: req.Thread, NS: req.NS, Expected: cp.ParentID, Head: head}}
	if !req.Fork && head != cp.ParentID {
		return conflict
	}
	parentStep, hasParent := 0, false
	if cp.ParentID != "" {
		step, ok, err := t.step(req.Thread, req.NS, cp.ParentID)
		if err != nil {
			return err
		}
		if !ok {
			return conflict // a fork's parent that does not exist
		}
		parentStep, hasParent = step, true
	}
	// The ID is taken, or (a fork) it does not sort after the head and
	// so could not become the head.
	if head != "" && cp.ID <= head {
		return conflict
	}
	if hasParent && cp.Metadata.Step <= parentStep {
		return errRollback{fmt.Errorf("%w: checkpoint %q: step %d does not follow its parent %q's step %d",
			checkpoint.ErrInvalid, cp.ID, cp.Metadata.Step, cp.ParentID, parentStep)}
	}
	if err := t.setLease(req.Thread, th, req.Lease, now, req.Release, false, nowText()); err != nil {
		return err
	}
	if _, err := t.exec(q.insert, args[:nargs]...); err != nil {
		if isConstraint(err) {
			return conflict
		}
		return err
	}
	if err := t.checkParentInterrupts(req); err != nil {
		return err
	}
	return t.insertWrites(req.Thread, req.NS, p.writes, nowText)
}

// checkParentInterrupts refuses a Put whose task writes raise an
// interrupt ID that another task saved on the parent (rare: the runtime
// saves interrupts with PutWrites). The new row is inserted already (a
// refusal rolls it back): for a fork, the parent's children, this one
// among them, count.
func (t *wtx) checkParentInterrupts(req *checkpoint.PutRequest) error {
	if req.Checkpoint.ParentID == "" {
		return nil
	}
	return t.checkInterrupts(req.Thread, req.NS, req.Checkpoint.ParentID, req.Fork, req.ParentWrites)
}

// touchThread records ?2 as the thread's last update.
const touchThread = `UPDATE threads SET updated_at = ?2 WHERE thread_id = ?1 AND checkpoint_ns = ''`

const releaseLease = `UPDATE threads SET lease_owner = NULL, lease_until = NULL, lease_runner = NULL, updated_at = ?2 WHERE thread_id = ?1 AND checkpoint_ns = ''`

// writesFast is a PutWrites on the head by the holder of a live lease: it
// records the time on the thread's row (and drops the lease when ?6)
// only when ?7 is the head of namespace ?2 and owner ?4 holds the
// thread's live lease at ?5.
const writesFast = `UPDATE threads SET updated_at = ?3,
	lease_owner = CASE WHEN ?6 THEN NULL ELSE lease_owner END, lease_until = CASE WHEN ?6 THEN NULL ELSE lease_until END,
	lease_runner = CASE WHEN ?6 THEN NULL ELSE lease_runner END
WHERE thread_id = ?1 AND checkpoint_ns = '' AND lease_owner = ?4 AND lease_until > ?5
	AND ` + headOf + ` = ?7`

// PutWrites implements checkpoint.Saver: it saves the tasks' writes as
// pending writes of the head checkpoint (regular writes insert-if-absent,
// special ones replace) and records the time on the thread's row, taking
// the lease when it is free or expired (a live lease of the same owner is
// kept as it is), in one IMMEDIATE transaction. It returns an error
// wrapping checkpoint.ErrInvalid for a malformed request, a
// *checkpoint.ConflictError when req.Ref.ID is not the head, a
// *checkpoint.BusyError when another runner holds the lease, and a
// *StoreError when SQLite fails; nothing is written on any error but an
// indeterminate commit (ErrCommitIndeterminate).
func (s *Saver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if err := checkpoint.ValidateWrites(&req); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	now := s.cfg.now()
	nowText := formatTime(now)
	rows := writeRows(nil, req.Ref.ID, req.Tasks)
	ref := req.Ref
	op := opInfo{op: "put writes", thread: ref.Thread, ns: ref.NS, checkpoint: ref.ID}
	return s.writeGrouped(ctx, op, "sqlite.writes", rowsSize(rows), func(t *wtx) error {
		if req.Release {
			// A run that stops here (an interrupt, a failure) is about to
			// be read back: GetState, a resume. Writes in the middle of a
			// step only drop the thread's head from the cache; the step's
			// checkpoint records the next one.
			t.writeRef, t.writeRows = &ref, rows
		}
		n, err := t.exec(writesFast, ref.Thread, ref.NS, nowText, req.Lease.Owner, now.UnixNano(), req.Release, ref.ID)
		if err != nil {
			return err
		}
		if n == 0 {
			th, err := t.thread(ref.Thread)
			if err != nil {
				return err
			}
			head, err := t.head(ref.Thread, ref.NS)
			if err != nil {
				return err
			}
			if head == "" || head != ref.ID {
				return errRollback{&checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: head}}
			}
			if err := th.busy(ref.Thread, ref.NS, req.Lease, now); err != nil {
				return errRollback{err}
			}
			if err := t.setLease(ref.Thread, th, req.Lease, now, req.Release, false, nowText); err != nil {
				return err
			}
		}
		if err := t.checkInterrupts(ref.Thread, ref.NS, ref.ID, false, req.Tasks); err != nil {
			return err
		}
		if err := t.insertWrites(ref.Thread, ref.NS, rows, func() string { return nowText }); err != nil {
			return err
		}
		return t.join(req.Joins)
	})
}

// claimFast takes or renews the thread's lease for owner ?3 and runner
// ?7 when ?6 is the head of namespace ?2 (NULL: it has no checkpoint) and
// no other owner holds a live lease, or the holder is the run ?8 of
// runner ?7 that the request takes back (NULL: none; see
// checkpoint.Lease.TakesBack); the epoch grows when the owner changes.
const claimFast = `UPDATE threads SET lease_owner = ?3, lease_until = ?4, lease_runner = ?7,
	lease_epoch = CASE WHEN lease_owner IS ?3 THEN lease_epoch ELSE lease_epoch + 1 END
WHERE thread_id = ?1 AND checkpoint_ns = '' AND (lease_owner IS NULL OR lease_owner = ?3 OR lease_until <= ?5 OR (lease_owner = ?8 AND lease_runner = ?7))
	AND ` + headOf + ` IS ?6`

// takeBack is the run l takes back, "" when l takes nothing back (see
// checkpoint.Lease.TakesBack).
func takeBack(l checkpoint.Lease) string {
	if l.TakesBack(l.TakeBack, l.Runner) {
		return l.TakeBack
	}
	return ""
}

// renewHeld renews the thread's lease of owner ?3 when ?6 is the head of
// namespace ?2 and the lease is still ?3's, live or expired (Lease.Held).
const renewHeld = `UPDATE threads SET lease_owner = ?3, lease_until = ?4
WHERE thread_id = ?1 AND checkpoint_ns = '' AND lease_owner = ?3
	AND ` + headOf + ` IS ?6`

// Claim implements checkpoint.Saver: it takes or renews (to now + TTL) the
// lease on a thread whose head is ref.ID ("" for a thread with no
// checkpoint, which creates the thread's row); with l.Held it only renews
// a lease l.Owner still holds. It is what a runner's heartbeat calls. It returns a *checkpoint.ConflictError when ref.ID is
// not the head, an error wrapping checkpoint.ErrInvalid for an empty
// owner, a *checkpoint.BusyError when another runner holds the lease, and
// a *StoreError when SQLite fails.
func (s *Saver) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	if err := validThread(ref.Thread); err != nil {
		return err
	}
	now := s.cfg.now()
	op := opInfo{op: "claim", thread: ref.Thread, ns: ref.NS, checkpoint: ref.ID}
	return s.write(ctx, op, "", func(t *wtx) error {
		if l.Owner != "" {
			q := claimFast
			if l.Held {
				q = renewHeld
			}
			args := []any{ref.Thread, ref.NS, l.Owner, now.Add(l.TTL).UnixNano(), now.UnixNano(), nullable(ref.ID)}
			if !l.Held {
				args = append(args, nullable(l.Runner), nullable(takeBack(l)))
			}
			n, err := t.exec(q, args...)
			if err != nil || n == 1 {
				return err
			}
		}
		th, err := t.thread(ref.Thread)
		if err != nil {
			return err
		}
		head, err := t.head(ref.Thread, ref.NS)
		if err != nil {
			return err
		}
		if head != ref.ID {
			return errRollback{&checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: head}}
		}
		if l.Owner == "" {
			return errRollback{fmt.Errorf("%w: empty lease owner", checkpoint.ErrInvalid)}
		}
		if l.Held && th.owner != l.Owner {
			// Someone else took the lease since (and may have released it).
			return errRollback{th.busyError(ref.Thread, ref.NS, l)}
		}
		if err := th.busy(ref.Thread, ref.NS, l, now); err != nil {
			return errRollback{err}
		}
		return t.setLease(ref.Thread, th, l, now, false, true, nil)
	})
}

// dropEmptyThread deletes the threads row of thread ?1 when it holds
// nothing: no checkpoint in any namespace, no lease, no due work and no
// queued input (a row a Claim, a Hold or an Enqueue created).
const dropEmptyThread = `DELETE FROM threads WHERE thread_id = ?1 AND checkpoint_ns = '' AND lease_owner IS NULL AND due_at IS NULL
AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = ?1)
AND NOT EXISTS (SELECT 1 FROM queued_inputs WHERE thread_id = ?1)`

// dropEmptyThreadV5 is dropEmptyThread on a file OpenExisting opened
// before schema 6, which has no due work and no queued input.
const dropEmptyThreadV5 = `DELETE FROM threads WHERE thread_id = ?1 AND checkpoint_ns = '' AND lease_owner IS NULL
AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = ?1)`

// Release implements checkpoint.Saver: it drops owner's lease on the
// thread (the one lease of all its namespaces, whatever ns names) if
// owner holds it; a thread row created by Claim alone goes with it. It is
// not an error when the lease expired or passed on; it returns a
// *StoreError when SQLite fails.
func (s *Saver) Release(ctx context.Context, thread, ns, owner string) error {
	op := opInfo{op: "release", thread: thread, ns: ns}
	return s.write(ctx, op, "", func(t *wtx) error {
		n, err := t.exec(`UPDATE threads SET lease_owner = NULL, lease_until = NULL, lease_runner = NULL WHERE thread_id = ? AND checkpoint_ns = '' AND lease_owner IS ?`,
			thread, nullable(owner))
		if err != nil || n == 0 {
			return err
		}
		if s.version < dueSchema {
			_, err = t.exec(dropEmptyThreadV5, thread)
		} else {
			_, err = t.exec(dropEmptyThread, thread)
		}
		return err
	})
}

// DeleteThread implements checkpoint.Saver: it deletes every checkpoint
// (pruned ones included), pending write and lease of the thread, in every
// namespace, in one transaction. Deleting a missing thread is not an
// error. It returns an error wrapping checkpoint.ErrInvalid for an empty
// thread and a *StoreError when SQLite fails.
func (s *Saver) DeleteThread(ctx context.Context, thread string) error {
	if err := validThread(thread); err != nil {
		return err
	}
	op := opInfo{op: "delete thread", thread: thread}
	return s.write(ctx, op, "", func(t *wtx) error {
		tables := []string{"writes", "checkpoints", "threads", "queued_inputs"}
		if s.version < dueSchema {
			tables = tables[:3]
		}
		for _, table := range tables {
			if _, err := t.exec("DELETE FROM "+table+" WHERE thread_id = ?", thread); err != nil {
				return err
			}
		}
		return nil
	})
}
