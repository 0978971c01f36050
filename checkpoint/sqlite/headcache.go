package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"slices"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// headCache keeps, per thread and namespace, the rows a Get of the head
// reads (the checkpoint row and its pending writes) as the writer
// connection last read or wrote them, so that reading back a head that
// nobody else has changed costs one PRAGMA instead of a query: a runner
// reading its thread to resume it, GetState right after a run.
//
// It is exact, never stale:
//
//   - PRAGMA data_version on the writer connection changes whenever any
//     other connection, in this process or another, commits to the file
//     (the pool's readers only read; another Saver, another process, the
//     sqlite3 shell or a caller writing through DB() all count). Get reads
//     it first and drops every entry when it changed.
//   - This Saver's own writes all run on the writer connection, in write,
//     which drops the entries of the thread written before it begins; a
//     Put or PutWrites that commits then records what it wrote (the row it
//     inserted, the writes merged by the rules of the writes table), and a
//     failed or indeterminate commit leaves the entry dropped.
//   - A new writer connection starts a new data_version sequence: the
//     cache is cleared with it.
//
// Every field is guarded by the writer semaphore (wsem).
type headCache struct {
	version int64                             // data_version the entries are current at; -1: unknown
	entries map[string]map[string]*cachedHead // by thread, then namespace
	n       int                               // entries in all
}

// cachedHead is a head as read: its row (with no decoded state) and its
// pending writes, in no particular order.
type cachedHead struct {
	row    cpRow
	writes []pendingRow
}

const (
	// maxCachedHeads bounds the entries; past it an arbitrary one goes.
	maxCachedHeads = 1024
	// maxCachedHeadBytes bounds the bytes of one entry: a bigger head is
	// read from the file each time (the copy a hit makes would no longer
	// be cheap next to the read).
	maxCachedHeadBytes = 256 << 10
)

func newHeadCache() *headCache {
	return &headCache{version: -1, entries: map[string]map[string]*cachedHead{}}
}

// reset drops every entry; the cache is current at version.
func (c *headCache) reset(version int64) {
	clear(c.entries)
	c.n = 0
	c.version = version
}

// entry returns the entry of (thread, ns), or nil.
func (c *headCache) entry(thread, ns string) *cachedHead { return c.entries[thread][ns] }

// dropThread drops the entries of thread in every namespace ("" drops
// every entry).
func (c *headCache) dropThread(thread string) {
	if thread == "" {
		c.reset(c.version)
		return
	}
	c.n -= len(c.entries[thread])
	delete(c.entries, thread)
}

// drop drops the entry of (thread, ns).
func (c *headCache) drop(thread, ns string) {
	if byNS := c.entries[thread]; byNS[ns] != nil {
		delete(byNS, ns)
		c.n--
		if len(byNS) == 0 {
			delete(c.entries, thread)
		}
	}
}

// get returns a copy of the entry of (thread, ns) as getQuery would have
// returned it, or false.
func (c *headCache) get(thread, ns string) (getResult, bool) {
	e := c.entry(thread, ns)
	if e == nil {
		return getResult{}, false
	}
	// A fresh cpRow (its decoded state is filled per read) and fresh
	// bytes: what a Get returns belongs to its caller.
	row, writes := cloneHead(e.row, e.writes)
	return getResult{row: &row, writes: writes}, true
}

// cloneHead copies a head's row and writes, bytes included.
func cloneHead(row cpRow, writes []pendingRow) (cpRow, []pendingRow) {
	row.metadata = bytes.Clone(row.metadata)
	row.versions = bytes.Clone(row.versions)
	row.channels = bytes.Clone(row.channels)
	row.taskWrite = bytes.Clone(row.taskWrite)
	writes = slices.Clone(writes)
	for i := range writes {
		writes[i].w.Value = bytes.Clone(writes[i].w.Value)
	}
	return row, writes
}

// put records a head for (thread, ns), unless it is too big to be worth
// it. It copies nothing: the caller hands over a row and writes nothing
// else refers to.
func (c *headCache) put(thread, ns string, row cpRow, writes []pendingRow) {
	c.drop(thread, ns)
	if headBytes(&row, writes) > maxCachedHeadBytes {
		return
	}
	if c.n >= maxCachedHeads {
		for th := range c.entries {
			c.dropThread(th)
			break
		}
	}
	row.checked, row.err = false, nil
	row.chans, row.chansErr, row.chansOK = nil, nil, false
	row.tws, row.twsErr, row.twsOK = nil, nil, false
	byNS := c.entries[thread]
	if byNS == nil {
		byNS = map[string]*cachedHead{}
		c.entries[thread] = byNS
	}
	byNS[ns] = &cachedHead{row: row, writes: writes}
	c.n++
}

// headBytes is the size of a head's row and writes.
func headBytes(row *cpRow, writes []pendingRow) int {
	size := len(row.metadata) + len(row.versions) + len(row.channels) + len(row.taskWrite)
	for _, w := range writes {
		size += len(w.w.Value) + len(w.w.TaskID) + len(w.w.Channel) + len(w.w.Node) + len(w.w.Path)
	}
	return size
}

// putRow records the head a Put committed: the row it inserted and the
// Put's own writes.
func (c *headCache) putRow(p *preparedPut) {
	req, cp := p.req, &p.req.Checkpoint
	size := len(p.row.metadata) + len(p.row.versions) + len(p.row.channels)
	if tw, ok := p.row.taskWrites.(string); ok {
		size += len(tw)
	}
	for _, w := range p.writes {
		size += len(w.value)
	}
	if size > maxCachedHeadBytes { // not worth copying
		c.drop(req.Thread, req.NS)
		return
	}
	row := cpRow{
		ns: req.NS, id: cp.ID, parent: cp.ParentID, step: p.row.step,
		source: p.row.source, created: p.row.created,
		metadata: []byte(p.row.metadata), versions: []byte(p.row.versions), channels: []byte(p.row.channels),
		mark: cp.Mark, crc: p.row.crc,
	}
	if tw, ok := p.row.taskWrites.(string); ok {
		row.taskWrite = []byte(tw)
	}
	c.put(req.Thread, req.NS, row, mergeWrites(nil, req.NS, p.writes))
}

// addWrites records the writes a PutWrites committed on the head ref.ID,
// given prev, the entry of the thread before the transaction; without
// one (or with one of another head) there is nothing to add to.
func (c *headCache) addWrites(prev *cachedHead, ref checkpoint.Ref, rows []writeRow) {
	if prev == nil || prev.row.id != ref.ID {
		return
	}
	size := 0
	for _, r := range rows {
		size += len(r.value)
	}
	if size > maxCachedHeadBytes { // not worth copying
		return
	}
	c.put(ref.Thread, ref.NS, prev.row, mergeWrites(prev.writes, ref.NS, rows))
}

// mergeWrites applies rows to a head's pending writes as the writes table
// does: a regular write is ignored when its (task, index) exists, a
// special one replaces it.
func mergeWrites(have []pendingRow, ns string, rows []writeRow) []pendingRow {
	out := slices.Clone(have)
	for _, r := range rows {
		p := pendingRow{ns: ns, checkpoint: r.checkpoint, crc: writeCRC(r.channel, r.node, r.path, r.value),
			indexedWrite: indexedWrite{idx: r.idx, w: checkpoint.PendingWrite{
				TaskID: r.task, Node: r.node, Path: r.path, Channel: r.channel, Value: bytes.Clone(r.value)}}}
		i := slices.IndexFunc(out, func(o pendingRow) bool { return o.w.TaskID == r.task && o.idx == r.idx })
		switch {
		case i < 0:
			out = append(out, p)
		case r.special:
			out[i] = p
		}
	}
	return out
}

const dataVersion = `PRAGMA data_version`

// cachedGet runs Get's first statement for the head of ref (ref.ID is "")
// on the writer connection c: from the cache when no other connection has
// committed since the entry was recorded, otherwise from the file, and
// then records the head it read. The caller holds wsem.
func (s *Saver) cachedGet(ctx context.Context, c *sql.Conn, ref checkpoint.Ref) (getResult, error) {
	t := &wtx{s: s, ctx: ctx}
	var v int64
	if err := t.queryRow(dataVersion).Scan(&v); err != nil {
		s.heads.reset(-1)
		return runGet(ctx, c, ref)
	}
	if v != s.heads.version {
		s.heads.reset(v)
	} else if res, ok := s.heads.get(ref.Thread, ref.NS); ok {
		return res, nil
	}
	res, err := runGet(ctx, c, ref)
	if err == nil && res.row != nil && headBytes(res.row, res.writes) <= maxCachedHeadBytes {
		row, writes := cloneHead(*res.row, res.writes)
		s.heads.put(ref.Thread, ref.NS, row, writes)
	}
	return res, err
}
