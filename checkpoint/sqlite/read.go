package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// getQuery reads, in one statement, the checkpoint ?3 (the head, the
// largest ID, when ?3 is empty), its rows of the writes table, for a
// checkpoint named by ID its children (rows whose parent it is: their
// task_writes are its pending writes too; the head has none), and the
// step of its parent (when the parent is still a checkpoint), which its
// own step must follow. The first column says which: 0 the checkpoint, 1
// a write, 2 a child, 3 the parent. Writes are mapped onto the
// checkpoint columns: task_id as the parent, idx as the step, channel as
// the source, node as the metadata, path as the versions and value as
// the channels; the parent's row holds only its ID and step.
const getQuery = `SELECT 0, ` + cpColumns + ` FROM checkpoints
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND pruned = 0
	AND checkpoint_id = coalesce(nullif(?3, ''), ` + headOf + `)
UNION ALL
SELECT 1, checkpoint_ns, checkpoint_id, task_id, idx, channel, created_at, node, path, value, NULL, '', 0, crc FROM writes
WHERE thread_id = ?1 AND checkpoint_ns = ?2
	AND checkpoint_id = coalesce(nullif(?3, ''), ` + headOf + `)
UNION ALL
SELECT 2, ` + cpColumns + ` FROM checkpoints
WHERE ?3 <> '' AND thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id > ?3 AND parent_checkpoint_id = ?3 AND pruned = 0
UNION ALL
SELECT 3, checkpoint_ns, checkpoint_id, NULL, step, '', '', '', '', '', NULL, '', 0, 0 FROM checkpoints
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND pruned = 0 AND checkpoint_id = (SELECT parent_checkpoint_id FROM checkpoints
	WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = coalesce(nullif(?3, ''), ` + headOf + `))`

// getResult is what getQuery returned.
type getResult struct {
	row      *cpRow
	writes   []pendingRow
	children []*cpRow
	verified bool // writes need no check: the head cache's own entry
	// cp is row's checkpoint (without channels) when decoded: the head
	// cache keeps it decoded.
	cp      checkpoint.Checkpoint
	decoded bool
	// parent is the step of row's parent, when it was read (parentRead).
	parentStep int64
	parentRead bool
	// trusted: the head cache's own entry, which Put and PutWrites
	// checked (checkpoint.ValidatePut...) when they wrote it; anything
	// read from the file is checked again by every read.
	trusted bool
}

// runGet runs getQuery on q: the pool (one statement, its own snapshot) or
// a connection in a read transaction.
func runGet(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, ref checkpoint.Ref) (getResult, error) {
	var res getResult
	rows, err := q.QueryContext(ctx, getQuery, ref.Thread, ref.NS, ref.ID)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind int
		r, err := scanRow(rows, &kind)
		if err != nil {
			return res, err
		}
		switch kind {
		case 0:
			res.row = r
		case 1:
			p := pendingRow{ns: r.ns, checkpoint: r.id, crc: r.crc}
			p.w = checkpoint.PendingWrite{TaskID: r.parent, Channel: r.source, Node: string(r.metadata), Path: string(r.versions), Value: json.RawMessage(r.channels)}
			p.idx = int(r.step)
			res.writes = append(res.writes, p)
		case 2:
			res.children = append(res.children, r)
		case 3:
			res.parentStep, res.parentRead = r.step, true
		}
	}
	return res, rows.Err()
}

// firstGet runs Get's first statement. When no write is in progress it
// runs on the writer connection: SQLite keeps a page cache per
// connection and drops it when another connection has written, so right
// after a save (a runner reading its thread back, GetState after a run)
// the writer's cache holds the pages a pooled connection would read again
// from the WAL. Otherwise it runs on the pool and never waits for a
// write.
func (s *Saver) firstGet(ctx context.Context, ref checkpoint.Ref) (getResult, error) {
	select {
	case s.wsem <- struct{}{}:
		defer func() { <-s.wsem }()
		if s.live() == nil {
			if c, err := s.writer(ctx); err == nil {
				if ref.ID == "" {
					return s.cachedGet(ctx, c, ref)
				}
				return runGet(ctx, c, ref)
			}
		}
	default:
	}
	return runGet(ctx, s.db, ref)
}

// Get implements checkpoint.Saver. The checkpoint ref names (the head,
// its largest ID, when ref.ID is "") comes with its pending writes and,
// for a checkpoint that is not the head, its children's task writes, from
// one statement. Channels the caller does not hold (opts.Have) are read
// from the rows of their versions: the head's own changes are in its row;
// older versions take one query by ID and, for append chains that go on
// past them, one recursive query, in a read transaction (one recursive
// query through the rows' links when the caller holds nothing of a
// chain). So reading the latest state costs the size of the state, not
// the length of the history. It returns an error matching checkpoint.ErrNotFound when there
// is no such checkpoint, a *checkpoint.CorruptError naming thread and
// checkpoint when a row fails its checksum or does not decode, an error
// wrapping checkpoint.ErrInvalid for an empty thread, and a *StoreError
// when SQLite fails.
func (s *Saver) Get(ctx context.Context, ref checkpoint.Ref, opts checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	if err := validThread(ref.Thread); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	op := opInfo{op: "get", thread: ref.Thread, ns: ref.NS, checkpoint: ref.ID}
	// Optimistically, one statement outside a transaction: enough when
	// there is no such checkpoint or when the caller holds every version
	// but those the row itself wrote (a reader that holds no state and
	// reads a thread with history goes on to a read transaction).
	res, err := s.firstGet(ctx, ref)
	if err != nil {
		return nil, s.readErr(op, err)
	}
	tp, err := s.tuple(ctx, nil, ref, res, opts.Have)
	if !errors.Is(err, errNeedRows) {
		if err != nil {
			return nil, s.readErr(op, err)
		}
		return tp, nil
	}
	err = s.read(ctx, op, func(c *sql.Conn) error {
		res, err := runGet(ctx, c, ref)
		if err != nil {
			return err
		}
		tp, err = s.tuple(ctx, c, ref, res, opts.Have)
		return err
	})
	if err != nil {
		return nil, err
	}
	return tp, nil
}

// errNeedRows: the tuple needs rows that one statement did not read.
var errNeedRows = errors.New("more rows needed")

// tuple builds the tuple of a getQuery result. With c nil it returns
// errNeedRows when channels need rows besides the checkpoint's own.
func (s *Saver) tuple(ctx context.Context, c *sql.Conn, ref checkpoint.Ref, res getResult, have map[string]string) (*checkpoint.Tuple, error) {
	if res.row == nil {
		return nil, fmt.Errorf("%w: %s", checkpoint.ErrNotFound, ref)
	}
	cp := res.cp
	if !res.decoded {
		var err error
		if cp, err = res.row.checkpoint(ref.Thread); err != nil {
			return nil, err
		}
	}
	rs := newRowSet(ref.Thread, ref.NS)
	rs.links = s.version >= linksSchema
	rs.add(res.row)
	if err := rs.fill(&cp, have); isMissing(err) {
		if c == nil {
			return nil, errNeedRows
		}
		need := func() ([]chainStart, error) { return rs.needs(&cp, have, nil) }
		starts, err := need()
		if err != nil {
			return nil, err
		}
		if err := rs.load(ctx, c, starts, need); err != nil {
			return nil, err
		}
		if err := rs.fill(&cp, have); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	tp := &checkpoint.Tuple{Thread: ref.Thread, NS: ref.NS, Checkpoint: cp}
	own := make([]indexedWrite, 0, len(res.writes))
	for i := range res.writes {
		if !res.verified {
			if err := res.writes[i].verify(ref.Thread); err != nil {
				return nil, err
			}
		}
		own = append(own, res.writes[i].indexedWrite)
	}
	slices.SortFunc(res.children, func(a, b *cpRow) int { return strings.Compare(a.id, b.id) })
	var children [][]indexedWrite
	for _, ch := range res.children {
		ws, err := ch.taskWrites(ref.Thread)
		if err != nil {
			return nil, err
		}
		children = append(children, ws)
	}
	tp.Pending = mergePending(own, children)
	if !res.trusted {
		// What only corruption writes (a Put or PutWrites refuses it) is
		// reported, not read as a checkpoint with fewer interrupts.
		if err := verifyTuple(tp, res.parentStep, res.parentRead); err != nil {
			return nil, err
		}
	}
	return tp, nil
}

// verifyTuple checks a tuple as read against the rules Put and PutWrites
// enforce (checkpoint.VerifyTuple), and its step against its parent's
// when the parent was read.
func verifyTuple(tp *checkpoint.Tuple, parentStep int64, parentRead bool) error {
	if err := checkpoint.VerifyTuple(tp); err != nil {
		return err
	}
	if parentRead {
		return checkpoint.VerifyStep(tp.Thread, &tp.Checkpoint, int(parentStep))
	}
	return nil
}

// readErr passes typed errors through and wraps driver errors.
func (s *Saver) readErr(op opInfo, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return s.live()
	}
	var ce *checkpoint.CorruptError
	if errors.As(err, &ce) || errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrInvalid) {
		return err
	}
	return op.storeErr(err)
}

// List implements checkpoint.Saver: the thread's checkpoints newest first,
// filtered by opts, each with its channels and pending writes, in one read
// transaction. The rows are read with one query (metadata filters with
// scalar values run in SQL: json_type/json_extract, values bound as
// parameters, keys checked with checkpoint.ValidFilterKey; object and
// array values are compared after decoding), and the tuples share the
// decoded channel bytes and chain prefixes. Versions older than the listed
// rows (Before, Limit, filters, pruned checkpoints) are read with one
// recursive query, and pending writes come from one query of the writes
// table and the children's task writes (the listed rows themselves when
// the list is a whole suffix of the history); with MetadataOnly neither
// versions nor writes are read. It returns an error wrapping
// checkpoint.ErrInvalid for an empty thread or a bad filter key, a
// *checkpoint.CorruptError when a row does not verify, and a *StoreError
// when SQLite fails.
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
	// Without Before and filters the list is every checkpoint newer than
	// its oldest one, so the children of every listed checkpoint are
	// listed too.
	whole := opts.Before == "" && len(opts.Filter) == 0
	out := []*checkpoint.Tuple{}
	op := opInfo{op: "list", thread: thread, ns: opts.NS}
	err := s.read(ctx, op, func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		var loaded []*cpRow
		for rows.Next() {
			r, err := scanRow(rows)
			if err != nil {
				rows.Close()
				return err
			}
			loaded = append(loaded, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		sets := map[string]*rowSet{}
		var nsOrder []string
		var tps []*checkpoint.Tuple
		for _, r := range loaded {
			rs := sets[r.ns]
			if rs == nil {
				rs = newRowSet(thread, r.ns)
				rs.links = s.version >= linksSchema
				sets[r.ns] = rs
				nsOrder = append(nsOrder, r.ns)
			}
			rs.add(r)
			if opts.Limit > 0 && len(tps) == opts.Limit {
				continue
			}
			cp, err := r.checkpoint(thread)
			if err != nil {
				return err
			}
			if !post.match(cp.Metadata) {
				continue
			}
			tps = append(tps, &checkpoint.Tuple{Thread: thread, NS: r.ns, Checkpoint: cp})
		}
		if opts.MetadataOnly {
			for _, tp := range tps {
				if err := checkpoint.VerifyCheckpoint(thread, &tp.Checkpoint); err != nil {
					return err
				}
				if step, read := sets[tp.NS].parentStep(&tp.Checkpoint); read {
					if err := checkpoint.VerifyStep(thread, &tp.Checkpoint, int(step)); err != nil {
						return err
					}
				}
			}
			out = append(out, tps...)
			return nil
		}
		for _, ns := range nsOrder {
			var mine []*checkpoint.Tuple
			for _, tp := range tps {
				if tp.NS == ns {
					mine = append(mine, tp)
				}
			}
			if len(mine) == 0 {
				continue
			}
			if err := sets[ns].fillList(ctx, c, mine, whole); err != nil {
				return err
			}
		}
		out = append(out, tps...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listWrites reads the writes table rows of a namespace from checkpoint ?3
// on; fillList keeps those of the listed checkpoints.
const listWrites = `SELECT ` + writeColumns + ` FROM writes
WHERE thread_id = CAST(?1 AS TEXT) AND checkpoint_ns = CAST(?2 AS TEXT) AND checkpoint_id >= ?3`

// listChildren reads the rows whose parent is one of the checkpoints in ?4
// (a JSON array), all newer than ?3.
const listChildren = `SELECT ` + cpColumns + ` FROM checkpoints
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id > ?3 AND pruned = 0
	AND parent_checkpoint_id IN (SELECT value FROM json_each(?4))`

// fillList loads the channels and pending writes of the listed tuples of
// one namespace (newest first). whole says that every child of a listed
// checkpoint is in rs already.
func (rs *rowSet) fillList(ctx context.Context, c *sql.Conn, tps []*checkpoint.Tuple, whole bool) error {
	// Fill from the listed rows; tuples whose chains go through rows not
	// listed (older than Before or the Limit, filtered out, pruned) are
	// filled again once those are read.
	var short []*checkpoint.Tuple
	for _, tp := range tps {
		if err := rs.fill(&tp.Checkpoint, nil); isMissing(err) {
			short = append(short, tp)
		} else if err != nil {
			return err
		}
	}
	if len(short) > 0 {
		need := func() ([]chainStart, error) {
			var starts []chainStart
			seen := map[chainStart]bool{}
			for _, tp := range short {
				more, err := rs.needs(&tp.Checkpoint, nil, nil)
				if err != nil {
					return nil, err
				}
				for _, st := range more {
					if !seen[st] {
						seen[st] = true
						starts = append(starts, st)
					}
				}
			}
			return starts, nil
		}
		starts, err := need()
		if err != nil {
			return err
		}
		if err := rs.load(ctx, c, starts, need); err != nil {
			return err
		}
		for _, tp := range short {
			if err := rs.fill(&tp.Checkpoint, nil); err != nil {
				return err
			}
		}
	}
	oldest := tps[len(tps)-1].Checkpoint.ID
	listed := make(map[string]*checkpoint.Tuple, len(tps))
	for _, tp := range tps {
		listed[tp.Checkpoint.ID] = tp
	}
	// The children's task writes.
	children := map[string][]*cpRow{}
	if whole {
		for _, r := range rs.rows {
			if listed[r.parent] != nil && !r.pruned {
				children[r.parent] = append(children[r.parent], r)
			}
		}
	} else {
		ids := make([]string, 0, len(tps))
		for _, tp := range tps {
			ids = append(ids, tp.Checkpoint.ID)
		}
		arg, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		rows, err := c.QueryContext(ctx, listChildren, rs.thread, rs.ns, oldest, string(arg))
		if err != nil {
			return err
		}
		for rows.Next() {
			r, err := scanRow(rows)
			if err != nil {
				rows.Close()
				return err
			}
			children[r.parent] = append(children[r.parent], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	own := map[string][]indexedWrite{}
	rows, err := c.QueryContext(ctx, listWrites, rs.thread, rs.ns, oldest)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanWrite(rows)
		if err != nil {
			return err
		}
		if listed[p.checkpoint] == nil {
			continue
		}
		if err := p.verify(rs.thread); err != nil {
			return err
		}
		own[p.checkpoint] = append(own[p.checkpoint], p.indexedWrite)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, tp := range tps {
		id := tp.Checkpoint.ID
		kids := children[id]
		slices.SortFunc(kids, func(a, b *cpRow) int { return strings.Compare(a.id, b.id) })
		var tws [][]indexedWrite
		for _, k := range kids {
			ws, err := k.taskWrites(rs.thread)
			if err != nil {
				return err
			}
			tws = append(tws, ws)
		}
		tp.Pending = mergePending(own[id], tws)
		step, read := rs.parentStep(&tp.Checkpoint)
		if err := verifyTuple(tp, step, read); err != nil {
			return err
		}
	}
	return nil
}

// parentStep returns the step of cp's parent when its row is loaded, is
// still a checkpoint and verifies (one that does not is reported when it
// is read itself).
func (rs *rowSet) parentStep(cp *checkpoint.Checkpoint) (int64, bool) {
	p := rs.rows[cp.ParentID]
	if p == nil || p.pruned || p.verify(rs.thread) != nil {
		return 0, false
	}
	return p.step, true
}

// listQuery builds the checkpoints query of List. Filters on scalar values
// become SQL; the others are returned as a filter to apply after decoding
// (and then the limit is applied after it too).
func listQuery(thread string, opts checkpoint.ListOptions) (string, []any, goFilter) {
	var b strings.Builder
	// CAST: see headOf (the query orders by the index it seeks).
	b.WriteString(`SELECT ` + cpColumns + ` FROM checkpoints WHERE thread_id = CAST(? AS TEXT) AND pruned = 0`)
	args, post := listWhere(&b, []any{thread}, opts)
	b.WriteString(` ORDER BY checkpoint_id DESC, checkpoint_ns`)
	if opts.Limit > 0 && len(post) == 0 {
		b.WriteString(` LIMIT ` + strconv.Itoa(opts.Limit))
	}
	return b.String(), args, post
}

// listWhere appends to b the conditions of opts after a WHERE clause
// (namespace, Before, the filters SQL can check) and returns the
// arguments and the filters left to check after decoding.
func listWhere(b *strings.Builder, args []any, opts checkpoint.ListOptions) ([]any, goFilter) {
	if !opts.AllNamespaces {
		b.WriteString(` AND checkpoint_ns = CAST(? AS TEXT)`)
		args = append(args, opts.NS)
	}
	if opts.Before != "" {
		b.WriteString(` AND checkpoint_id < ?`)
		args = append(args, opts.Before)
	}
	keys := sortedKeys(opts.Filter)
	post := goFilter{}
	for _, k := range keys {
		path := `$."` + k + `"` // k is [A-Za-z0-9_]{1,64}; bound as a parameter anyway
		clause, cargs, exact := filterClause(path, opts.Filter[k])
		if !exact {
			post[k] = opts.Filter[k]
		}
		if clause == "" {
			continue
		}
		b.WriteString(" AND ")
		b.WriteString(clause)
		args = append(args, cargs...)
	}
	return args, post
}

// filterClause returns the SQL for one metadata filter, comparing as
// checkpoint.MetadataMatches does: by the JSON value, numbers by exact
// value, and a nil filter value matching an absent key or a JSON null.
// exact is false when the clause only narrows the rows and the filter
// must also run after decoding: for arrays and objects (the clause is
// empty) and for numbers other than int64 integers (the clause keeps
// numbers within a relative 1e-12 of the value: SQLite reads them as
// float64). An integer filter value is compared in SQL exactly: stored
// integers in int64 range are always plain integer literals (see
// checkpoint.Metadata), which SQLite compares as integers.
func filterClause(path string, want any) (clause string, args []any, exact bool) {
	b, err := json.Marshal(want)
	if err != nil {
		return "0", nil, true // nothing can equal a value that does not encode
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var norm any
	if err := d.Decode(&norm); err != nil {
		return "0", nil, true
	}
	// json_valid guards the JSON functions: a row whose metadata is not
	// JSON is listed (and then reported corrupt) instead of failing the
	// query.
	switch v := norm.(type) {
	case nil:
		return `(NOT json_valid(metadata) OR coalesce(json_type(metadata, ?), 'null') = 'null')`, []any{path}, true
	case bool:
		t := "false"
		if v {
			t = "true"
		}
		return `(NOT json_valid(metadata) OR json_type(metadata, ?) IS ?)`, []any{path, t}, true
	case string:
		return `(NOT json_valid(metadata) OR json_type(metadata, ?) IS 'text' AND json_extract(metadata, ?) = ?)`, []any{path, path, v}, true
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return `(NOT json_valid(metadata) OR json_type(metadata, ?) IS 'integer' AND json_extract(metadata, ?) = ?)`, []any{path, path, i}, true
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return `(NOT json_valid(metadata) OR json_type(metadata, ?) IN ('integer', 'real'))`, []any{path}, false
		}
		d := math.Abs(f)*1e-12 + 1e-300
		return `(NOT json_valid(metadata) OR json_type(metadata, ?) IN ('integer', 'real') AND json_extract(metadata, ?) BETWEEN ? AND ?)`, []any{path, path, f - d, f + d}, false
	}
	return "", nil, false
}

// goFilter holds the filters that run after decoding: keys whose values
// SQL does not compare exactly (arrays, objects, numbers other than int64
// integers).
type goFilter map[string]any

func (f goFilter) match(m checkpoint.Metadata) bool {
	return checkpoint.MetadataMatches(m, f)
}
