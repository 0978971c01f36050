package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// cpRow is a checkpoints row as read.
type cpRow struct {
	ns, id, parent, created, metadata, versions, mark string
	crc                                               int64
}

const cpColumns = `checkpoint_ns, checkpoint_id, parent_checkpoint_id, created_at, metadata, versions, mark, crc`

func scanCheckpoint(sc interface{ Scan(...any) error }) (cpRow, error) {
	var r cpRow
	var parent sql.NullString
	err := sc.Scan(&r.ns, &r.id, &parent, &r.created, &r.metadata, &r.versions, &r.mark, &r.crc)
	r.parent = parent.String
	return r, err
}

// decode verifies the row's checksum and decodes it. Channels are filled
// later.
func (r *cpRow) decode(thread string) (checkpoint.Checkpoint, error) {
	corrupt := func(err error) error {
		return &checkpoint.CorruptError{Thread: thread, Checkpoint: r.id, What: "checkpoint", Err: err}
	}
	cp := checkpoint.Checkpoint{ID: r.id, ParentID: r.parent, Mark: r.mark}
	if got := checkpointCRC(r.parent, r.created, r.metadata, r.versions, r.mark); got != r.crc {
		return cp, corrupt(fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", uint32(r.crc), uint32(got)))
	}
	t, err := parseTime(r.created)
	if err != nil {
		return cp, corrupt(fmt.Errorf("created_at: %w", err))
	}
	cp.CreatedAt = t
	if !json.Valid([]byte(r.metadata)) {
		return cp, corrupt(errors.New("metadata is not valid JSON"))
	}
	if err := json.Unmarshal([]byte(r.metadata), &cp.Metadata); err != nil {
		return cp, corrupt(fmt.Errorf("metadata: %w", err))
	}
	if err := json.Unmarshal([]byte(r.versions), &cp.Versions); err != nil {
		return cp, corrupt(fmt.Errorf("versions: %w", err))
	}
	return cp, nil
}

// blobKey names a blob: a channel at a version.
type blobKey struct{ channel, version string }

// blobRow is a blobs row as read; it is checked once, on first use.
type blobRow struct {
	blob    checkpoint.Blob
	kind    string
	crc     int64
	checked bool
	err     error
}

func (b *blobRow) verify() error {
	if b.checked {
		return b.err
	}
	b.checked = true
	switch {
	case b.kind != "value" && b.kind != "append":
		b.err = fmt.Errorf("blob version %s: unknown kind %q", b.blob.Version, b.kind)
	case blobCRC(b.kind, b.blob.Base, b.blob.Data) != b.crc:
		b.err = fmt.Errorf("blob version %s: checksum mismatch", b.blob.Version)
	case !json.Valid(b.blob.Data):
		b.err = fmt.Errorf("blob version %s: value is not valid JSON", b.blob.Version)
	case b.blob.Append && !isJSONArray(b.blob.Data):
		b.err = fmt.Errorf("blob version %s: appended items are not a JSON array", b.blob.Version)
	}
	return b.err
}

func isJSONArray(b []byte) bool {
	s := strings.TrimLeft(string(b[:min(len(b), 64)]), " \t\r\n")
	return strings.HasPrefix(s, "[")
}

// chainQuery walks the Base links of the requested blobs (a JSON array of
// [channel, version, stop] triples) back to the start of each chain, or to
// the stop version the caller already holds, and returns every blob on the
// way once: chains that share a prefix share its rows. CROSS JOIN keeps
// the chain as the outer loop, so that each step is one primary-key seek
// (the planner cannot size a recursive table and would otherwise scan the
// thread's blobs).
const chainQuery = `WITH RECURSIVE
start(channel, version, stop) AS (
	SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?3)
),
chain(channel, version, stop) AS (
	SELECT channel, version, stop FROM start
	UNION
	SELECT b.channel, b.base, c.stop FROM chain c CROSS JOIN blobs b
		ON b.thread_id = ?1 AND b.checkpoint_ns = ?2 AND b.channel = c.channel AND b.version = c.version
	WHERE b.kind = 'append' AND b.base <> '' AND b.base <> c.stop
)
SELECT b.channel, b.version, b.base, b.kind, b.value, b.crc FROM chain c CROSS JOIN blobs b
	ON b.thread_id = ?1 AND b.checkpoint_ns = ?2 AND b.channel = c.channel AND b.version = c.version`

// startQuery reads the blobs at the given [channel, version] pairs (a JSON
// array), without following their links: a recursive query has a fixed
// cost of tens of microseconds, which the usual read (the runtime holds
// everything but the newest blobs) does not need to pay.
const startQuery = `SELECT b.channel, b.version, b.base, b.kind, b.value, b.crc FROM json_each(?3) j CROSS JOIN blobs b
	ON b.thread_id = ?1 AND b.checkpoint_ns = ?2 AND b.channel = j.value ->> 0 AND b.version = j.value ->> 1`

type chainStart [3]string // channel, version, stop

// loadChains reads the blobs of the chains in starts (one per channel):
// the first blob of each with one query, then, only for append chains
// that go on past what the caller holds, the rest with chainQuery.
func loadChains(ctx context.Context, c *sql.Conn, thread, ns string, starts []chainStart, into map[blobKey]*blobRow) error {
	if len(starts) == 0 {
		return nil
	}
	if err := queryBlobs(ctx, c, startQuery, thread, ns, starts, into); err != nil {
		return err
	}
	var more []chainStart
	for _, st := range starts {
		b := into[blobKey{st[0], st[1]}]
		if b != nil && b.kind == "append" && b.blob.Base != "" && b.blob.Base != st[2] {
			more = append(more, chainStart{st[0], b.blob.Base, st[2]})
		}
	}
	if len(more) == 0 {
		return nil
	}
	return queryBlobs(ctx, c, chainQuery, thread, ns, more, into)
}

// loadBlobs reads the blobs the chains starting at starts need, in one
// recursive query.
func loadBlobs(ctx context.Context, c *sql.Conn, thread, ns string, starts []chainStart, into map[blobKey]*blobRow) error {
	if len(starts) == 0 {
		return nil
	}
	return queryBlobs(ctx, c, chainQuery, thread, ns, starts, into)
}

func queryBlobs(ctx context.Context, c *sql.Conn, query, thread, ns string, starts []chainStart, into map[blobKey]*blobRow) error {
	arg, err := json.Marshal(starts)
	if err != nil {
		return err
	}
	rows, err := c.QueryContext(ctx, query, thread, ns, string(arg))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ch, version, base, kind, value string
		var crc int64
		if err := rows.Scan(&ch, &version, &base, &kind, &value, &crc); err != nil {
			return err
		}
		k := blobKey{ch, version}
		if _, ok := into[k]; ok {
			continue
		}
		into[k] = &blobRow{
			blob: checkpoint.Blob{Version: version, Base: base, Append: kind == "append", Data: json.RawMessage(value)},
			kind: kind, crc: crc,
		}
	}
	return rows.Err()
}

// chainKey names a materialised chain: channel, version, and the version
// the walk stopped at ("" for a whole chain).
type chainKey struct{ channel, version, stop string }

// chains materialises blob chains from loaded rows, sharing the backing
// arrays of chains with a common prefix (history lists the same append
// chain once per checkpoint).
type chains struct {
	rows    map[blobKey]*blobRow
	memo    map[chainKey][]checkpoint.Blob
	claimed map[chainKey]bool // the slot after this chain's end is taken
}

func newChains(rows map[blobKey]*blobRow) *chains {
	return &chains{rows: rows, memo: map[chainKey][]checkpoint.Blob{}, claimed: map[chainKey]bool{}}
}

// chain returns the blobs of ch at version, oldest first, ending the walk
// at stop (exclusive) as checkpoint.GetOptions.Have says. The result's
// capacity equals its length, so appending to it never writes into a
// chain shared with another tuple.
func (cs *chains) chain(ch, version, stop string) ([]checkpoint.Blob, error) {
	key := chainKey{ch, version, stop}
	if c, ok := cs.memo[key]; ok {
		return c[:len(c):len(c)], nil
	}
	var path []*blobRow // newest first
	var prefix []checkpoint.Blob
	var prefixKey chainKey
	v := version
	for {
		if stop != "" && v == stop && len(path) > 0 {
			break
		}
		if len(path) > 0 {
			if c, ok := cs.memo[chainKey{ch, v, stop}]; ok {
				prefix, prefixKey = c, chainKey{ch, v, stop}
				break
			}
		}
		r := cs.rows[blobKey{ch, v}]
		if r == nil {
			return nil, fmt.Errorf("missing blob for version %s", v)
		}
		if err := r.verify(); err != nil {
			return nil, err
		}
		path = append(path, r)
		if !r.blob.Append || r.blob.Base == "" {
			break
		}
		if len(path) > len(cs.rows) {
			return nil, fmt.Errorf("cycle in blob chain at version %s", v)
		}
		v = r.blob.Base
	}
	var out []checkpoint.Blob
	switch {
	case prefix == nil:
		out = make([]checkpoint.Blob, 0, len(path))
	case cs.claimed[prefixKey]:
		out = append(make([]checkpoint.Blob, 0, len(prefix)+len(path)), prefix...)
	default:
		cs.claimed[prefixKey] = true
		out = prefix
	}
	for i := len(path) - 1; i >= 0; i-- {
		out = append(out, path[i].blob)
		k := chainKey{ch, path[i].blob.Version, stop}
		if i > 0 {
			cs.claimed[k] = true
		}
		if _, ok := cs.memo[k]; !ok {
			cs.memo[k] = out
		}
	}
	return out[:len(out):len(out)], nil
}

// fill sets cp.Channels from the loaded chains, leaving out what have
// says the caller holds.
func (cs *chains) fill(thread string, cp *checkpoint.Checkpoint, have map[string]string) error {
	cp.Channels = make(map[string][]checkpoint.Blob, len(cp.Versions))
	for ch, v := range cp.Versions {
		if have[ch] == v {
			continue
		}
		c, err := cs.chain(ch, v, have[ch])
		if err != nil {
			return &checkpoint.CorruptError{Thread: thread, Checkpoint: cp.ID, What: "channel " + ch, Err: err}
		}
		cp.Channels[ch] = c
	}
	return nil
}

func starts(cp *checkpoint.Checkpoint, have map[string]string, dst []chainStart) []chainStart {
	for ch, v := range cp.Versions {
		if have[ch] == v {
			continue
		}
		dst = append(dst, chainStart{ch, v, have[ch]})
	}
	return dst
}

// writeRowOut is a writes row as read.
type pendingRow struct {
	ns, checkpoint string
	w              checkpoint.PendingWrite
	crc            int64
}

func (p *pendingRow) verify(thread string) error {
	var err error
	switch {
	case writeCRC(p.w.Channel, p.w.Node, p.w.Path, p.w.Value) != p.crc:
		err = errors.New("checksum mismatch")
	case !json.Valid(p.w.Value):
		err = errors.New("value is not valid JSON")
	}
	if err != nil {
		return &checkpoint.CorruptError{Thread: thread, Checkpoint: p.checkpoint,
			What: fmt.Sprintf("pending write of task %s channel %q", p.w.TaskID, p.w.Channel), Err: err}
	}
	return nil
}

const writeColumns = `checkpoint_ns, checkpoint_id, task_id, channel, value, node, path, crc`

func scanWrite(sc interface{ Scan(...any) error }) (pendingRow, error) {
	var p pendingRow
	var value string
	err := sc.Scan(&p.ns, &p.checkpoint, &p.w.TaskID, &p.w.Channel, &value, &p.w.Node, &p.w.Path, &p.crc)
	p.w.Value = json.RawMessage(value)
	return p, err
}

const getCheckpoint = `SELECT ` + cpColumns + ` FROM checkpoints
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = CASE WHEN ?3 = '' THEN
	(SELECT head_checkpoint_id FROM threads WHERE thread_id = ?1 AND checkpoint_ns = ?2) ELSE ?3 END`

const getWrites = `SELECT ` + writeColumns + ` FROM writes
WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_id, idx`

// Get implements checkpoint.Saver. The head, or the checkpoint ref.ID
// names, is read with its channels (append chains walked back to their
// start, or to the version opts.Have says the caller holds) and its
// pending writes, in one read transaction. It returns an error matching
// checkpoint.ErrNotFound when there is no such checkpoint, a
// *checkpoint.CorruptError naming thread and checkpoint when a row fails
// its checksum or does not decode, an error wrapping checkpoint.ErrInvalid
// for an empty thread, and a *StoreError when SQLite fails.
func (s *Saver) Get(ctx context.Context, ref checkpoint.Ref, opts checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	if err := validThread(ref.Thread); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var tp *checkpoint.Tuple
	op := opInfo{op: "get", thread: ref.Thread, ns: ref.NS, checkpoint: ref.ID}
	err := s.read(ctx, op, func(c *sql.Conn) error {
		row, err := scanCheckpoint(c.QueryRowContext(ctx, getCheckpoint, ref.Thread, ref.NS, ref.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", checkpoint.ErrNotFound, ref)
		}
		if err != nil {
			return err
		}
		cp, err := row.decode(ref.Thread)
		if err != nil {
			return err
		}
		blobs := map[blobKey]*blobRow{}
		if err := loadChains(ctx, c, ref.Thread, ref.NS, starts(&cp, opts.Have, nil), blobs); err != nil {
			return err
		}
		if err := newChains(blobs).fill(ref.Thread, &cp, opts.Have); err != nil {
			return err
		}
		tp = &checkpoint.Tuple{Thread: ref.Thread, NS: ref.NS, Checkpoint: cp}
		rows, err := c.QueryContext(ctx, getWrites, ref.Thread, ref.NS, cp.ID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p, err := scanWrite(rows)
			if err != nil {
				return err
			}
			if err := p.verify(ref.Thread); err != nil {
				return err
			}
			tp.Pending = append(tp.Pending, p.w)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return tp, nil
}

// List implements checkpoint.Saver: the thread's checkpoints newest first,
// filtered by opts, each with its channels and pending writes. Blobs and
// writes are fetched in bulk (one query each per namespace), blob bytes
// and chain prefixes are shared between the tuples. Metadata filters with
// scalar values run in SQL (json_extract, values bound as parameters, keys
// checked with checkpoint.ValidFilterKey); object and array values are
// compared after decoding. It returns an error wrapping checkpoint.ErrInvalid
// for an empty thread or a bad filter key, a *checkpoint.CorruptError when a
// row does not verify, and a *StoreError when SQLite fails.
func (s *Saver) List(ctx context.Context, thread string, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	if err := validThread(thread); err != nil {
		return nil, err
	}
	for k := range opts.Filter {
		if !checkpoint.ValidFilterKey(k) {
			return nil, fmt.Errorf("%w: filter key %q is not [A-Za-z0-9_]{1,64}", checkpoint.ErrInvalid, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, args, post := listQuery(thread, opts)
	out := []*checkpoint.Tuple{}
	op := opInfo{op: "list", thread: thread, ns: opts.NS}
	err := s.read(ctx, op, func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		var cps []cpRow
		for rows.Next() {
			r, err := scanCheckpoint(rows)
			if err != nil {
				rows.Close()
				return err
			}
			cps = append(cps, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		byNS := map[string][]*checkpoint.Tuple{}
		var nsOrder []string
		for i := range cps {
			cp, err := cps[i].decode(thread)
			if err != nil {
				return err
			}
			if !post.match(cp.Metadata) {
				continue
			}
			tp := &checkpoint.Tuple{Thread: thread, NS: cps[i].ns, Checkpoint: cp}
			out = append(out, tp)
			if _, ok := byNS[tp.NS]; !ok {
				nsOrder = append(nsOrder, tp.NS)
			}
			byNS[tp.NS] = append(byNS[tp.NS], tp)
			if opts.Limit > 0 && len(out) == opts.Limit {
				break
			}
		}
		for _, ns := range nsOrder {
			if err := s.fillList(ctx, c, thread, ns, byNS[ns]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

const listWrites = `SELECT ` + writeColumns + ` FROM writes
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id IN (SELECT value FROM json_each(?3))
ORDER BY checkpoint_id, task_id, idx`

// fillList loads the channels and pending writes of tuples of one
// namespace.
func (s *Saver) fillList(ctx context.Context, c *sql.Conn, thread, ns string, tps []*checkpoint.Tuple) error {
	var st []chainStart
	seen := map[chainStart]bool{}
	ids := make([]string, 0, len(tps))
	byID := make(map[string]*checkpoint.Tuple, len(tps))
	for _, tp := range tps {
		for ch, v := range tp.Checkpoint.Versions {
			k := chainStart{ch, v, ""}
			if !seen[k] {
				seen[k] = true
				st = append(st, k)
			}
		}
		ids = append(ids, tp.Checkpoint.ID)
		byID[tp.Checkpoint.ID] = tp
	}
	blobs := map[blobKey]*blobRow{}
	if err := loadBlobs(ctx, c, thread, ns, st, blobs); err != nil {
		return err
	}
	cs := newChains(blobs)
	for _, tp := range tps {
		if err := cs.fill(thread, &tp.Checkpoint, nil); err != nil {
			return err
		}
	}
	idArg, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	rows, err := c.QueryContext(ctx, listWrites, thread, ns, string(idArg))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanWrite(rows)
		if err != nil {
			return err
		}
		if err := p.verify(thread); err != nil {
			return err
		}
		if tp := byID[p.checkpoint]; tp != nil {
			tp.Pending = append(tp.Pending, p.w)
		}
	}
	return rows.Err()
}

// listQuery builds the checkpoints query of List. Filters on scalar values
// become SQL; the others are returned as a filter to apply after decoding
// (and then the limit is applied after it too).
func listQuery(thread string, opts checkpoint.ListOptions) (string, []any, goFilter) {
	var b strings.Builder
	b.WriteString(`SELECT ` + cpColumns + ` FROM checkpoints WHERE thread_id = ?`)
	args := []any{thread}
	if !opts.AllNamespaces {
		b.WriteString(` AND checkpoint_ns = ?`)
		args = append(args, opts.NS)
	}
	if opts.Before != "" {
		b.WriteString(` AND checkpoint_id < ?`)
		args = append(args, opts.Before)
	}
	keys := make([]string, 0, len(opts.Filter))
	for k := range opts.Filter {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	post := goFilter{}
	for _, k := range keys {
		path := `$."` + k + `"` // k is [A-Za-z0-9_]{1,64}; bound as a parameter anyway
		clause, cargs, ok := filterClause(path, opts.Filter[k])
		if !ok {
			post[k] = opts.Filter[k]
			continue
		}
		b.WriteString(" AND ")
		b.WriteString(clause)
		args = append(args, cargs...)
	}
	b.WriteString(` ORDER BY checkpoint_id DESC, checkpoint_ns`)
	if opts.Limit > 0 && len(post) == 0 {
		b.WriteString(` LIMIT ?`)
		args = append(args, opts.Limit)
	}
	return b.String(), args, post
}

// filterClause returns the SQL for one metadata filter, comparing as
// package checkpoint does: by the JSON value, numbers by value, and a nil
// filter value matching an absent key or a JSON null. ok is false for
// values that are not scalars.
func filterClause(path string, want any) (clause string, args []any, ok bool) {
	b, err := json.Marshal(want)
	if err != nil {
		return "0", nil, true // nothing can equal a value that does not encode
	}
	var norm any
	if err := json.Unmarshal(b, &norm); err != nil {
		return "0", nil, true
	}
	switch v := norm.(type) {
	case nil:
		return `coalesce(json_type(metadata, ?), 'null') = 'null'`, []any{path}, true
	case bool:
		t := "false"
		if v {
			t = "true"
		}
		return `json_type(metadata, ?) IS ?`, []any{path, t}, true
	case string:
		return `(json_type(metadata, ?) IS 'text' AND json_extract(metadata, ?) = ?)`, []any{path, path, v}, true
	case float64:
		return `(json_type(metadata, ?) IN ('integer', 'real') AND json_extract(metadata, ?) = ?)`, []any{path, path, v}, true
	}
	return "", nil, false
}

// goFilter holds the filters that run after decoding: keys with object or
// array values.
type goFilter map[string]any

func (f goFilter) match(m checkpoint.Metadata) bool {
	if len(f) == 0 {
		return true
	}
	b, err := json.Marshal(m)
	if err != nil {
		return false
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return false
	}
	for k, want := range f {
		got, ok := obj[k]
		if !ok || !sameJSON(got, want) {
			return false
		}
	}
	return true
}

func sameJSON(a, b any) bool {
	ab, err1 := json.Marshal(normalise(a))
	bb, err2 := json.Marshal(normalise(b))
	return err1 == nil && err2 == nil && string(ab) == string(bb)
}

func normalise(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}
