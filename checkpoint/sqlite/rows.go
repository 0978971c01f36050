package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// This file holds the rows a read loads: a checkpoint row verified and
// decoded on demand, a pending write, the merge of a checkpoint's pending
// writes, and the set of rows of one thread from which channel chains are
// materialised (loading the rows a chain still needs).

// cpRow is a checkpoints row as read. Its JSON columns are decoded on
// first use, after the row's checksum was verified.
type cpRow struct {
	ns, id, parent      string
	step                int64
	source, created     string
	metadata, versions  []byte
	channels, taskWrite []byte
	mark                string
	pruned              bool
	crc                 int64

	checked bool
	err     error // checksum mismatch, found by verify
	// lazy: channels and taskWrite are still in chanSrc and twSrc (a
	// row served from the head cache with its checkpoint decoded, whose
	// channels are often not needed at all); blobs copies them.
	lazy           bool
	chanSrc, twSrc string
	chans          []chanBlob
	chansErr       error
	chansOK        bool
	tws            []indexedWrite
	twsErr         error
	twsOK          bool
}

// cpColumns are the columns scanRow reads, in order.
const cpColumns = `checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, versions, channels, task_writes, mark, pruned, crc`

type scannable interface{ Scan(...any) error }

func scanRow(sc scannable, extra ...any) (*cpRow, error) {
	r := &cpRow{}
	var parent sql.NullString
	dest := append(extra, &r.ns, &r.id, &parent, &r.step, &r.source, &r.created, &r.metadata, &r.versions,
		&r.channels, &r.taskWrite, &r.mark, &r.pruned, &r.crc)
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	r.parent = parent.String
	return r, nil
}

func (r *cpRow) corrupt(thread, what string, err error) error {
	return &checkpoint.CorruptError{Thread: thread, Checkpoint: r.id, What: what, Err: err}
}

// verify checks the row's checksum once.
func (r *cpRow) verify(thread string) error {
	if !r.checked {
		r.checked = true
		got := rowCRC(thread, r.ns, r.id, r.parent, r.step, r.source, r.created, r.metadata, r.versions, r.channels, r.taskWrite, r.mark, r.pruned)
		if got != r.crc {
			r.err = r.corrupt(thread, "checkpoint", fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", uint32(r.crc), uint32(got)))
		}
	}
	return r.err
}

// checkpoint verifies and decodes the row, without channels.
func (r *cpRow) checkpoint(thread string) (checkpoint.Checkpoint, error) {
	cp := checkpoint.Checkpoint{ID: r.id, ParentID: r.parent, Mark: r.mark}
	if err := r.verify(thread); err != nil {
		return cp, err
	}
	t, err := parseTime(r.created)
	if err != nil {
		return cp, r.corrupt(thread, "checkpoint", fmt.Errorf("created_at: %w", err))
	}
	cp.CreatedAt = t
	if cp.Metadata, err = decodeMetadata(r.metadata); err != nil {
		return cp, r.corrupt(thread, "checkpoint", fmt.Errorf("metadata: %w", err))
	}
	// The step and source columns are copies of the metadata's, for SQL.
	if !r.pruned && (int64(cp.Metadata.Step) != r.step || string(cp.Metadata.Source) != r.source) {
		return cp, r.corrupt(thread, "checkpoint", fmt.Errorf("metadata says step %d source %q, the row's columns step %d source %q",
			cp.Metadata.Step, cp.Metadata.Source, r.step, r.source))
	}
	if string(r.versions) != "null" {
		if cp.Versions, err = decodeVersions(r.versions); err != nil {
			return cp, r.corrupt(thread, "checkpoint", fmt.Errorf("versions: %w", err))
		}
	}
	return cp, nil
}

// blobs verifies the row and returns its decoded channels.
func (r *cpRow) blobs(thread string) ([]chanBlob, error) {
	if err := r.verify(thread); err != nil {
		return nil, err
	}
	if !r.chansOK {
		r.chansOK = true
		if r.lazy {
			r.lazy = false
			r.channels = []byte(r.chanSrc)
			if r.twSrc != "" {
				r.taskWrite = []byte(r.twSrc)
			}
		}
		r.chans, r.chansErr = decodeChannels(r.channels, r.id)
		if r.chansErr != nil {
			r.chansErr = r.corrupt(thread, "channels", r.chansErr)
		}
	}
	return r.chans, r.chansErr
}

// blob returns the blob the row holds for channel ch.
func (r *cpRow) blob(thread, ch string) (checkpoint.Blob, bool, error) {
	chans, err := r.blobs(thread)
	if err != nil {
		return checkpoint.Blob{}, false, err
	}
	for _, e := range chans {
		if e.channel == ch {
			return e.blob, true, nil
		}
	}
	return checkpoint.Blob{}, false, nil
}

// taskWrites returns the writes of the tasks that produced the row: pending
// writes of its parent.
func (r *cpRow) taskWrites(thread string) ([]indexedWrite, error) {
	chans, err := r.blobs(thread)
	if err != nil {
		return nil, err
	}
	if !r.twsOK {
		r.twsOK = true
		r.tws, r.twsErr = decodeTaskWrites(r.taskWrite, chans)
		if r.twsErr != nil {
			r.twsErr = r.corrupt(thread, "task writes", r.twsErr)
		}
	}
	return r.tws, r.twsErr
}

// indexedWrite is a pending write with its checkpoint.WriteIndex.
type indexedWrite struct {
	w   checkpoint.PendingWrite
	idx int
}

// pendingRow is a writes row as read.
type pendingRow struct {
	ns, checkpoint string
	indexedWrite
	crc int64
}

// verify checks the row's checksum, which covers its key (a row copied
// from another thread, checkpoint, task or index does not verify), and
// that its index is the one checkpoint.WriteIndex gives its channel. What
// its value must be is checked with the checkpoint's other writes
// (checkpoint.VerifyPending).
func (p *pendingRow) verify(thread string) error {
	var err error
	switch {
	case writeCRC(thread, p.ns, p.checkpoint, p.w.TaskID, p.idx, p.w.Channel, p.w.Node, p.w.Path, p.w.Value) != p.crc:
		err = errors.New("checksum mismatch")
	case checkpoint.IsSpecial(p.w.Channel) && p.idx != checkpoint.WriteIndex(p.w.Channel, 0),
		!checkpoint.IsSpecial(p.w.Channel) && p.idx < 0:
		err = fmt.Errorf("index %d is not the one its channel is saved under", p.idx)
	}
	if err != nil {
		return &checkpoint.CorruptError{Thread: thread, Checkpoint: p.checkpoint,
			What: fmt.Sprintf("pending write of task %q channel %q", p.w.TaskID, p.w.Channel), Err: err}
	}
	return nil
}

const writeColumns = `checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, crc`

func scanWrite(sc scannable) (pendingRow, error) {
	var p pendingRow
	var value []byte
	err := sc.Scan(&p.ns, &p.checkpoint, &p.w.TaskID, &p.idx, &p.w.Channel, &value, &p.w.Node, &p.w.Path, &p.crc)
	p.w.Value = json.RawMessage(value)
	return p, err
}

// mergePending computes a checkpoint's pending writes: its own rows of
// the writes table (saved while it was the head), then the task writes of
// its children in child order, each applied as PutWrites applies writes:
// a regular write is ignored when its (task, index) exists, a special one
// replaces it. The result is ordered by task, then index; nil when empty.
// Without children own is sorted in place: callers pass a slice of their
// own.
func mergePending(own []indexedWrite, children [][]indexedWrite) []checkpoint.PendingWrite {
	type key struct {
		task string
		idx  int
	}
	all := own
	if len(children) > 0 {
		all = slices.Clone(own)
		at := make(map[key]int, len(own))
		for i, w := range all {
			at[key{w.w.TaskID, w.idx}] = i
		}
		for _, ws := range children {
			for _, w := range ws {
				k := key{w.w.TaskID, w.idx}
				if i, ok := at[k]; ok {
					if checkpoint.IsSpecial(w.w.Channel) {
						all[i] = w
					}
					continue
				}
				at[k] = len(all)
				all = append(all, w)
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortFunc(all, func(a, b indexedWrite) int {
		return cmp.Or(strings.Compare(a.w.TaskID, b.w.TaskID), cmp.Compare(a.idx, b.idx))
	})
	out := make([]checkpoint.PendingWrite, len(all))
	for i, w := range all {
		out[i] = w.w
	}
	return out
}

// rowSet holds the rows of one (thread, namespace) loaded by a read and
// materialises channel chains from them, sharing the backing arrays of
// chains with a common prefix (history lists the same append chain once
// per checkpoint).
type rowSet struct {
	thread, ns string
	rows       map[string]*cpRow
	memo       map[chainKey][]checkpoint.Blob
	claimed    map[chainKey]bool // the slot after this chain's end is taken
	complete   map[chainKey]bool // missing found every row of this chain
	// links: the file has the links column (linksSchema), so that load
	// walks chains with chainLinks.
	links bool
}

// newRowSet returns an empty row set; its maps are made on first use (a
// read that the caller's Have leaves with nothing to walk needs none).
func newRowSet(thread, ns string) *rowSet {
	return &rowSet{thread: thread, ns: ns}
}

func (rs *rowSet) add(r *cpRow) {
	if rs.rows == nil {
		rs.rows = map[string]*cpRow{}
	}
	if _, ok := rs.rows[r.id]; !ok {
		rs.rows[r.id] = r
	}
}

// chainKey names a materialised chain: channel, version, and the version
// the walk stopped at ("" for a whole chain).
type chainKey struct{ channel, version, stop string }

// chainStart is a chain to load: channel, version, and the version to stop
// at (exclusive).
type chainStart [3]string

// errMissing: a version the chain needs is not loaded.
type errMissing struct{ version string }

func (e errMissing) Error() string { return "missing blob for version " + strconv.Quote(e.version) }

// isMissing reports whether err is (or wraps) an errMissing.
func isMissing(err error) bool {
	if err == nil {
		return false
	}
	var m errMissing
	return errors.As(err, &m)
}

// step returns the blob of ch at version v from the loaded rows.
func (rs *rowSet) step(ch, v string) (checkpoint.Blob, error) {
	r := rs.rows[v]
	if r == nil {
		return checkpoint.Blob{}, errMissing{v}
	}
	b, ok, err := r.blob(rs.thread, ch)
	if err != nil {
		return b, err
	}
	if !ok {
		return b, fmt.Errorf("checkpoint %q holds no blob for channel %q", v, ch)
	}
	return b, nil
}

// missing walks the chain of ch at version v (stopping at stop, as
// checkpoint.GetOptions.Have says) through the loaded rows and returns the
// first version that is not loaded, or "". Walks that completed are
// remembered, so that the chains of a whole history are walked once.
func (rs *rowSet) missing(ch, v, stop string) (string, error) {
	var path []chainKey
	for {
		k := chainKey{ch, v, stop}
		if rs.complete[k] || rs.memo[k] != nil {
			break
		}
		path = append(path, k)
		b, err := rs.step(ch, v)
		var m errMissing
		if errors.As(err, &m) {
			return v, nil
		}
		if err != nil {
			return "", err
		}
		if !b.Append || b.Base == "" || b.Base == stop {
			break
		}
		if len(path) > len(rs.rows) {
			return "", fmt.Errorf("cycle in blob chain at version %q", v)
		}
		v = b.Base
	}
	if rs.complete == nil && len(path) > 0 {
		rs.complete = map[chainKey]bool{}
	}
	for _, k := range path {
		rs.complete[k] = true
	}
	return "", nil
}

// chain returns the blobs of ch at version, oldest first, ending the walk
// at stop (exclusive). The result's capacity equals its length, so
// appending to it never writes into a chain shared with another tuple.
func (rs *rowSet) chain(ch, version, stop string) ([]checkpoint.Blob, error) {
	key := chainKey{ch, version, stop}
	if c, ok := rs.memo[key]; ok {
		return c[:len(c):len(c)], nil
	}
	var path []checkpoint.Blob // newest first
	var prefix []checkpoint.Blob
	var prefixKey chainKey
	v := version
	for {
		if len(path) > 0 {
			if stop != "" && v == stop {
				break
			}
			if c, ok := rs.memo[chainKey{ch, v, stop}]; ok {
				prefix, prefixKey = c, chainKey{ch, v, stop}
				break
			}
		}
		b, err := rs.step(ch, v)
		if err != nil {
			return nil, err
		}
		path = append(path, b)
		if !b.Append || b.Base == "" {
			break
		}
		if len(path) > len(rs.rows) {
			return nil, fmt.Errorf("cycle in blob chain at version %q", v)
		}
		v = b.Base
	}
	if rs.memo == nil {
		rs.memo, rs.claimed = map[chainKey][]checkpoint.Blob{}, map[chainKey]bool{}
	}
	var out []checkpoint.Blob
	switch {
	case prefix == nil:
		out = make([]checkpoint.Blob, 0, len(path))
	case rs.claimed[prefixKey]:
		out = append(make([]checkpoint.Blob, 0, len(prefix)+len(path)), prefix...)
	default:
		rs.claimed[prefixKey] = true
		out = prefix
	}
	for i := len(path) - 1; i >= 0; i-- {
		out = append(out, path[i])
		k := chainKey{ch, path[i].Version, stop}
		if i > 0 {
			rs.claimed[k] = true
		}
		if _, ok := rs.memo[k]; !ok {
			rs.memo[k] = out
		}
	}
	return out[:len(out):len(out)], nil
}

// skipped reports whether have lets a read leave channel ch at version v
// out (checkpoint.GetOptions.Have).
func skipped(have map[string]string, ch, v string) bool {
	hv, ok := have[ch]
	return ok && hv == v
}

// needs returns the chains of cp that go through rows not loaded yet.
func (rs *rowSet) needs(cp *checkpoint.Checkpoint, have map[string]string, dst []chainStart) ([]chainStart, error) {
	for ch, v := range cp.Versions {
		if skipped(have, ch, v) {
			continue
		}
		m, err := rs.missing(ch, v, have[ch])
		if err != nil {
			return nil, rs.chainErr(cp.ID, ch, err)
		}
		if m != "" {
			dst = append(dst, chainStart{ch, m, have[ch]})
		}
	}
	return dst, nil
}

// chainErr reports a broken chain of channel ch of checkpoint id. A row
// on the chain that does not verify is named as it is.
func (rs *rowSet) chainErr(id, ch string, err error) error {
	var ce *checkpoint.CorruptError
	if errors.As(err, &ce) {
		return err
	}
	return &checkpoint.CorruptError{Thread: rs.thread, Checkpoint: id, What: "channel " + ch, Err: err}
}

// fill sets cp.Channels from the loaded rows, leaving out what have says
// the caller holds.
func (rs *rowSet) fill(cp *checkpoint.Checkpoint, have map[string]string) error {
	cp.Channels = make(map[string][]checkpoint.Blob, len(cp.Versions))
	for ch, v := range cp.Versions {
		if skipped(have, ch, v) {
			continue
		}
		c, err := rs.chain(ch, v, have[ch])
		if err != nil {
			return rs.chainErr(cp.ID, ch, err)
		}
		cp.Channels[ch] = c
	}
	return nil
}

// rowsByID reads the rows of the given versions.
const rowsByID = `SELECT ` + cpColumns + ` FROM checkpoints
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id IN (SELECT value FROM json_each(?3))`

// chainRows walks the Base links of the chains in ?3 (a JSON array of
// [channel, version, stop] triples) back to the start of each chain, or to
// the stop version the caller already holds, and returns every row on the
// way once: chains that share a prefix share its rows. Each step is one
// primary-key seek; the link is read with json_extract from the row's
// channels (the channel name quoted as a JSON path label), and the step
// carries the row's rowid, so the rows are then read without a second
// index seek. A row whose channels are not JSON fails the query, and load
// then finds that row by ID lookups (which report it corrupt). CROSS JOIN
// keeps the chain as the outer loop.
const chainRows = `WITH RECURSIVE chain(channel, version, stop, rid) AS (
	SELECT value ->> 0, value ->> 1, value ->> 2, NULL FROM json_each(?3)
	UNION
	SELECT c.channel, json_extract(r.channels, '$.' || json_quote(c.channel) || '.base'), c.stop, r.rowid FROM chain c
	CROSS JOIN checkpoints r ON r.thread_id = ?1 AND r.checkpoint_ns = ?2 AND r.checkpoint_id = c.version
	WHERE c.version <> '' AND c.version <> c.stop
)
SELECT ` + cpColumns + ` FROM checkpoints WHERE rowid IN (SELECT rid FROM chain)`

// chainLinks is chainRows on a file with the links column (linksSchema):
// each step reads the link from the row's links, a few bytes, instead of
// parsing its channels (up to megabytes: the whole value a chain starts
// at); rows written before the column was added (links NULL) are walked
// through their channels as chainRows walks them. A links that is not
// JSON fails the query as a channels that is not JSON does.
const chainLinks = `WITH RECURSIVE chain(channel, version, stop, rid) AS (
	SELECT value ->> 0, value ->> 1, value ->> 2, NULL FROM json_each(?3)
	UNION
	SELECT c.channel, CASE WHEN r.links IS NULL THEN json_extract(r.channels, '$.' || json_quote(c.channel) || '.base')
		ELSE json_extract(r.links, '$.' || json_quote(c.channel)) END, c.stop, r.rowid FROM chain c
	CROSS JOIN checkpoints r ON r.thread_id = ?1 AND r.checkpoint_ns = ?2 AND r.checkpoint_id = c.version
	WHERE c.version <> '' AND c.version <> c.stop
)
SELECT ` + cpColumns + ` FROM checkpoints WHERE rowid IN (SELECT rid FROM chain)`

// load reads the rows the chains in starts need into rs: first the rows
// the chains start at, with one query by ID, then, for chains that go on
// through rows still missing, the rest with one recursive query. (A
// recursive query has a fixed cost that the usual read, where the caller
// holds all but the newest versions, need not pay.) When the recursive
// query fails (a row on the way is not JSON), the rows are read by ID, one
// round per link, until the chains are complete or stop at a row that
// does not decode, which the caller then reports. With the links column
// (rs.links) a walk costs a few bytes a row, and a chain the caller holds
// nothing of (a cold read: its stop is "") is walked from the first
// round, in one query; whatever links fail to find (a damaged links
// column) is then read by ID through channels.
func (rs *rowSet) load(ctx context.Context, c *sql.Conn, starts []chainStart, need func() ([]chainStart, error)) error {
	recursive, walk := true, chainRows
	first := 1
	if rs.links {
		walk = chainLinks
		for _, st := range starts {
			if st[2] == "" {
				first = 0
				break
			}
		}
	}
	for round := 0; len(starts) > 0; round++ {
		if round >= first && recursive {
			arg, err := json.Marshal(starts)
			if err != nil {
				return err
			}
			err = rs.query(ctx, c, walk, string(arg))
			switch {
			case err == nil && !rs.links:
				return nil // what is still missing, fill reports
			case err != nil && (ctx.Err() != nil || isBusy(err)):
				return err
			}
			// What a failed walk, or links that do not match the
			// channels, left out is read by ID.
			recursive = false
		} else {
			ids := make([]string, 0, len(starts))
			for _, st := range starts {
				ids = append(ids, st[1])
			}
			arg, err := json.Marshal(ids)
			if err != nil {
				return err
			}
			n := len(rs.rows)
			if err := rs.query(ctx, c, rowsByID, string(arg)); err != nil {
				return err
			}
			if len(rs.rows) == n {
				return nil // nothing new: fill reports what is missing
			}
		}
		var err error
		if starts, err = need(); err != nil {
			return err
		}
	}
	return nil
}

func (rs *rowSet) query(ctx context.Context, c *sql.Conn, query, arg string) error {
	rows, err := c.QueryContext(ctx, query, rs.thread, rs.ns, arg)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return err
		}
		rs.add(r)
	}
	return rows.Err()
}
