package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"maps"
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
	version int64 // data_version the entries are current at; -1: unknown
	entries map[headKey]*cachedHead
	// nested counts the entries of each thread outside the root
	// namespace, so that dropping a thread's entries needs no scan when
	// it has none (the usual case).
	nested map[string]int
}

type headKey struct{ thread, ns string }

// cachedHead is a head as read: the columns of its row and its pending
// writes (in no particular order). The columns are strings, which nothing
// writes: a Put's entry shares the bytes of the row it inserted, and
// every read gets its own copy.
type cachedHead struct {
	ns, id, parent                          string
	step                                    int64
	source, created                         string
	metadata, versions, channels, taskWrite string
	mark                                    string
	crc                                     int64
	parentStep                              int64 // the step of its parent, when parentRead
	parentRead                              bool
	writes                                  []pendingRow
	// own: the entry holds only what this saver wrote (its checksums
	// were computed from the values, not read), so a read served from it
	// skips verifying them again. An entry recorded from a read is
	// verified by every read, as a read of the file is.
	own bool
	// dec is the row decoded, once a read served from the entry found
	// the row and its writes verified (or own); nil until then, or when
	// the metadata has caller keys. Nothing changes it: an entry copied
	// to add writes (addWrites) shares it, as it shares the row, and the
	// writes it adds are this saver's own.
	dec *decodedHead
}

// decodedHead is a cached head's checkpoint as decoded, without channels
// and with no Metadata.Extra. A read served from it copies its maps (the
// caller may change them) instead of decoding the row again.
type decodedHead struct{ cp checkpoint.Checkpoint }

// checkpoint returns a copy of the decoded checkpoint for a caller.
func (d *decodedHead) checkpoint() checkpoint.Checkpoint {
	cp := d.cp
	cp.Versions = maps.Clone(d.cp.Versions)
	cp.Metadata.Parents = maps.Clone(d.cp.Metadata.Parents)
	return cp
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
	return &headCache{version: -1, entries: map[headKey]*cachedHead{}, nested: map[string]int{}}
}

// reset drops every entry; the cache is current at version.
func (c *headCache) reset(version int64) {
	clear(c.entries)
	clear(c.nested)
	c.version = version
}

// entry returns the entry of (thread, ns), or nil.
func (c *headCache) entry(thread, ns string) *cachedHead { return c.entries[headKey{thread, ns}] }

// dropThread drops the entries of thread in every namespace ("" drops
// every entry).
func (c *headCache) dropThread(thread string) {
	if thread == "" {
		c.reset(c.version)
		return
	}
	delete(c.entries, headKey{thread, ""})
	if c.nested[thread] > 0 {
		for k := range c.entries {
			if k.thread == thread {
				delete(c.entries, k)
			}
		}
		delete(c.nested, thread)
	}
}

// set stores e as the entry of (thread, ns), or drops that entry when e
// is nil or too big to be worth keeping.
func (c *headCache) set(thread, ns string, e *cachedHead) {
	key := headKey{thread, ns}
	if _, ok := c.entries[key]; ok {
		c.remove(key)
	}
	if e == nil || e.size() > maxCachedHeadBytes {
		return
	}
	if len(c.entries) >= maxCachedHeads {
		for k := range c.entries {
			c.remove(k)
			break
		}
	}
	c.entries[key] = e
	if ns != "" {
		c.nested[thread]++
	}
}

// remove deletes the entry under key, which exists.
func (c *headCache) remove(key headKey) {
	delete(c.entries, key)
	if key.ns != "" {
		if c.nested[key.thread]--; c.nested[key.thread] == 0 {
			delete(c.nested, key.thread)
		}
	}
}

// size is the bytes of the entry's row and writes.
func (e *cachedHead) size() int {
	return len(e.metadata) + len(e.versions) + len(e.channels) + len(e.taskWrite) + writesBytes(e.writes)
}

// writesBytes is the size of pending writes, as a head's entry counts it.
func writesBytes(ws []pendingRow) int {
	n := 0
	for _, w := range ws {
		n += len(w.w.Value) + len(w.w.TaskID) + len(w.w.Channel) + len(w.w.Node) + len(w.w.Path)
	}
	return n
}

// get returns a copy of the entry of (thread, ns) as getQuery would have
// returned it, or false. The first read of an entry verifies and decodes
// its row (when the saver did not write it itself, as a read of the file
// would), and the entry keeps the decoded checkpoint: later reads copy
// it, and copy the row's channels only if the caller needs them.
func (c *headCache) get(thread, ns string) (getResult, bool) {
	e := c.entry(thread, ns)
	if e == nil {
		return getResult{}, false
	}
	if e.dec == nil {
		e.decode(thread)
	}
	if d := e.dec; d != nil {
		row := &cpRow{ns: e.ns, id: e.id, parent: e.parent, step: e.step, source: e.source, created: e.created,
			mark: e.mark, crc: e.crc, checked: true, lazy: true, chanSrc: e.channels, twSrc: e.taskWrite}
		return getResult{row: row, cp: d.checkpoint(), decoded: true, writes: cloneWrites(e.writes), verified: true,
			trusted: e.own, parentStep: e.parentStep, parentRead: e.parentRead}, true
	}
	return e.copy(), true
}

// decode sets e.dec when e's row and writes verify and decode.
func (e *cachedHead) decode(thread string) {
	res := e.copy()
	if !e.own {
		if res.row.verify(thread) != nil {
			return
		}
		for i := range res.writes {
			if res.writes[i].verify(thread) != nil {
				return
			}
		}
	}
	cp, err := res.row.checkpoint(thread)
	if err != nil || cp.Metadata.Extra != nil {
		return
	}
	e.dec = &decodedHead{cp: cp}
}

// cloneWrites copies pending writes, their values into one new array.
func cloneWrites(ws []pendingRow) []pendingRow {
	if len(ws) == 0 {
		return nil
	}
	out := slices.Clone(ws)
	n := 0
	for _, w := range ws {
		n += len(w.w.Value)
	}
	buf := make([]byte, 0, n)
	for i := range out {
		if v := out[i].w.Value; v != nil {
			start := len(buf)
			buf = append(buf, v...)
			out[i].w.Value = buf[start:len(buf):len(buf)]
		}
	}
	return out
}

// copy is the entry as getQuery would have returned it.
func (e *cachedHead) copy() getResult {
	// A fresh cpRow (its decoded state is filled per read) and fresh
	// bytes: what a Get returns belongs to its caller.
	row := &cpRow{ns: e.ns, id: e.id, parent: e.parent, step: e.step, source: e.source, created: e.created,
		metadata: []byte(e.metadata), versions: []byte(e.versions), channels: []byte(e.channels), mark: e.mark, crc: e.crc,
		checked: e.own}
	if e.taskWrite != "" {
		row.taskWrite = []byte(e.taskWrite)
	}
	writes := slices.Clone(e.writes)
	for i := range writes {
		writes[i].w.Value = bytes.Clone(writes[i].w.Value)
	}
	return getResult{row: row, writes: writes, verified: e.own, trusted: e.own, parentStep: e.parentStep, parentRead: e.parentRead}
}

// readSize is the size headOfRead's entry would have.
func readSize(r *cpRow, writes []pendingRow) int {
	return len(r.metadata) + len(r.versions) + len(r.channels) + len(r.taskWrite) + writesBytes(writes)
}

// headOfRead is the entry for a head as getQuery read it (copied).
func headOfRead(res getResult) *cachedHead {
	r, writes := res.row, res.writes
	e := &cachedHead{ns: r.ns, id: r.id, parent: r.parent, step: r.step, source: r.source, created: r.created,
		metadata: string(r.metadata), versions: string(r.versions), channels: string(r.channels), taskWrite: string(r.taskWrite),
		mark: r.mark, crc: r.crc, parentStep: res.parentStep, parentRead: res.parentRead, writes: slices.Clone(writes)}
	for i := range e.writes {
		e.writes[i].w.Value = bytes.Clone(e.writes[i].w.Value)
	}
	return e
}

// putRow records the head a Put committed: the row it inserted (sharing
// its bytes) and the Put's own writes.
func (c *headCache) putRow(p *preparedPut) {
	req, cp := p.req, &p.req.Checkpoint
	e := &cachedHead{ns: req.NS, id: cp.ID, parent: cp.ParentID, step: p.row.step, source: p.row.source, created: p.row.created,
		metadata: p.row.metadata, versions: p.row.versions, channels: p.row.channels, mark: cp.Mark, crc: p.row.crc, own: true}
	if tw, ok := p.row.taskWrites.(string); ok {
		e.taskWrite = tw
	}
	if e.size() > maxCachedHeadBytes { // before copying the writes
		c.set(req.Thread, req.NS, nil)
		return
	}
	if len(p.writes) > 0 {
		e.writes = mergeWrites(nil, req.Thread, req.NS, p.writes)
	}
	c.set(req.Thread, req.NS, e)
}

// addWrites records the writes a PutWrites committed on the head ref.ID,
// given prev, the entry of the thread before the transaction; without
// one (or with one of another head) there is nothing to add to.
func (c *headCache) addWrites(prev *cachedHead, ref checkpoint.Ref, rows []writeRow) {
	if prev == nil || prev.id != ref.ID {
		return
	}
	size := prev.size()
	for _, r := range rows {
		size += len(r.value)
	}
	if size > maxCachedHeadBytes { // not worth copying
		return
	}
	e := *prev
	e.writes = mergeWrites(prev.writes, ref.Thread, ref.NS, rows)
	c.set(ref.Thread, ref.NS, &e)
}

// mergeWrites applies rows to a head's pending writes as the writes table
// does: a regular write is ignored when its (task, index) exists, a
// special one replaces it.
func mergeWrites(have []pendingRow, thread, ns string, rows []writeRow) []pendingRow {
	out := slices.Clone(have)
	for _, r := range rows {
		p := pendingRow{ns: ns, checkpoint: r.checkpoint, crc: writeCRC(thread, ns, r.checkpoint, r.task, r.idx, r.channel, r.node, r.path, r.value),
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
// on the writer connection c. A thread this saver has no entry for (one it
// has not written or read since the last commit of another connection) is
// read from the file, with no version check: the common case of a reader
// that has nothing to gain, such as a run starting a new thread, pays
// nothing. Otherwise the entry is served when no other connection has
// committed since it was recorded; when one has, every entry is dropped
// and the head read from the file is recorded. The caller holds wsem.
func (s *Saver) cachedGet(ctx context.Context, c *sql.Conn, ref checkpoint.Ref) (getResult, error) {
	if s.heads.entry(ref.Thread, ref.NS) == nil {
		return runGet(ctx, c, ref)
	}
	t := &wtx{s: s, ctx: ctx}
	var v int64
	if err := t.queryRow(dataVersion).Scan(&v); err != nil {
		s.heads.reset(-1)
		return runGet(ctx, c, ref)
	}
	if v == s.heads.version {
		res, _ := s.heads.get(ref.Thread, ref.NS)
		return res, nil
	}
	s.heads.reset(v)
	// Read after the version: whatever it returns is current at v.
	res, err := runGet(ctx, c, ref)
	if err == nil && res.row != nil && readSize(res.row, res.writes) <= maxCachedHeadBytes {
		s.heads.set(ref.Thread, ref.NS, headOfRead(res))
	}
	return res, err
}
