package badinput_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

// The bad-input pass over stored rows whose checksums match (issue 16):
// rows edited by hand and re-checksummed by someone who knows the format
// (the sqlite package doc describes it), and rows copied between threads
// with the checksum they had. Each edit is something only corruption
// writes; each is a *checkpoint.CorruptError naming the thread and a
// checkpoint from every reader and runner, and nothing is written.

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// crcParts is the CRC-32C of parts, each followed by a NUL byte.
func crcParts(parts ...[]byte) int64 {
	var c uint32
	for _, p := range parts {
		c = crc32.Update(c, crcTable, p)
		c = crc32.Update(c, crcTable, []byte{0})
	}
	return int64(c)
}

// badRechecksum recomputes the checksums of every checkpoints and writes
// row of thread as the file's schema defines them: a checkpoint row's
// covers all its columns, its key included; a writes row's covers its
// channel, node, path and value and, from schema 4, its key.
func badRechecksum(ctx context.Context, db *sql.DB, thread string) error {
	var schema int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&schema); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT rowid, checkpoint_ns, checkpoint_id, coalesce(parent_checkpoint_id, ''), step, source, created_at,
		metadata, versions, channels, coalesce(task_writes, ''), mark, pruned FROM checkpoints WHERE thread_id = ?`, thread)
	if err != nil {
		return err
	}
	type fix struct {
		table string
		rowid int64
		crc   int64
	}
	var fixes []fix
	for rows.Next() {
		var rowid, step int64
		var ns, id, parent, source, created, metadata, versions, channels, tw, mark string
		var pruned bool
		if err := rows.Scan(&rowid, &ns, &id, &parent, &step, &source, &created, &metadata, &versions, &channels, &tw, &mark, &pruned); err != nil {
			rows.Close()
			return err
		}
		p := "0"
		if pruned {
			p = "1"
		}
		fixes = append(fixes, fix{"checkpoints", rowid, crcParts([]byte(thread), []byte(ns), []byte(id), []byte(parent), []byte(strconv.FormatInt(step, 10)),
			[]byte(source), []byte(created), []byte(metadata), []byte(versions), []byte(channels), []byte(tw), []byte(mark), []byte(p))})
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT rowid, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path FROM writes WHERE thread_id = ?`, thread)
	if err != nil {
		return err
	}
	for rows.Next() {
		var rowid, idx int64
		var ns, id, task, channel, value, node, path string
		if err := rows.Scan(&rowid, &ns, &id, &task, &idx, &channel, &value, &node, &path); err != nil {
			rows.Close()
			return err
		}
		crc := crcParts([]byte(channel), []byte(node), []byte(path), []byte(value))
		if schema >= 4 {
			crc = crcParts([]byte(thread), []byte(ns), []byte(id), []byte(task), []byte(strconv.FormatInt(idx, 10)),
				[]byte(channel), []byte(node), []byte(path), []byte(value))
		}
		fixes = append(fixes, fix{"writes", rowid, crc})
	}
	rows.Close()
	for _, f := range fixes {
		if _, err := db.ExecContext(ctx, `UPDATE `+f.table+` SET crc = ? WHERE rowid = ?`, f.crc, f.rowid); err != nil {
			return err
		}
	}
	return nil
}

// badRows is the edit of a case: SQL on the file (?1 is the thread
// "wait", ?2 the ID of its head), then the checksums recomputed unless
// the edit is a copy that keeps its own.
func badRows(query string, fix bool) func(ctx context.Context, f *badFixture) error {
	return func(ctx context.Context, f *badFixture) error {
		var head string
		if err := f.db.QueryRowContext(ctx, `SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'wait'`).Scan(&head); err != nil {
			return err
		}
		res, err := f.db.ExecContext(ctx, query, "wait", head)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("the edit changed nothing")
		}
		if fix {
			if err := badRechecksum(ctx, f.db, "wait"); err != nil {
				return err
			}
		}
		// A fresh Runnable reads it (no decoded state cached).
		f.r, err = badGraph(true).Compile(graph.WithSaver(f.app.Saver))
		return err
	}
}

// TestBadInputCorruptRows: special writes that json.Marshal could not
// have written (item 3), rows copied from another thread (item 3),
// metadata and scheduling only corruption writes (item 4), and values
// that would change silently (item 8), on the waiting thread "wait".
func TestBadInputCorruptRows(t *testing.T) {
	const interrupt = `UPDATE writes SET value = %s WHERE thread_id = ?1 AND checkpoint_id = ?2 AND channel = '__interrupt__'`
	const headRow = ` WHERE thread_id = ?1 AND checkpoint_id = ?2`
	edits := []struct {
		name, sql string
		fix       bool
	}{
		{"interrupt null", fmt.Sprintf(interrupt, `'null'`), true},
		{"interrupt duplicate id key", fmt.Sprintf(interrupt, `replace(value, '{"id":', '{"id":"x","id":')`), true},
		{"interrupt case-variant id key", fmt.Sprintf(interrupt, `replace(value, '{"id":', '{"ID":"x","id":')`), true},
		{"interrupt lone surrogate", fmt.Sprintf(interrupt, `replace(value, '"name?"', '"name\ud800"')`), true},
		{"interrupt invalid UTF-8", fmt.Sprintf(interrupt, `replace(value, '"name?"', '"name' || CAST(x'ff' AS TEXT) || '"')`), true},
		{"two interrupts with one ID", fmt.Sprintf(interrupt, `'[' || json_extract(value, '$[0]') || ',' || json_extract(value, '$[0]') || ']'`), true},
		{"interrupt row copied from another thread", `INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)
			SELECT ?1, checkpoint_ns, ?2, task_id, idx, channel, value, node, path, created_at, crc FROM writes
			WHERE thread_id = 'pay-wait' AND channel = '__interrupt__'`, false},
		{"next names no node", `UPDATE checkpoints SET versions = json_set(versions, '$."branch:to:"', checkpoint_id),
			channels = json_set(channels, '$."branch:to:"', json('{"value":null}'))` + headRow, true},
		{"step negative", `UPDATE checkpoints SET step = -5, metadata = json_set(metadata, '$.step', -5)` + headRow, true},
		{"step MaxInt64", `UPDATE checkpoints SET step = 9223372036854775807, metadata = json_set(metadata, '$.step', 9223372036854775807)` + headRow, true},
		{"step not after the parent's", `UPDATE checkpoints SET step = step - 1, metadata = json_set(metadata, '$.step', step - 1)` + headRow, true},
		{"head sorts before its parent", `UPDATE checkpoints SET parent_checkpoint_id = checkpoint_id || 'z'` + headRow, true},
		{"metadata lone surrogate", `UPDATE checkpoints SET metadata = replace(metadata, '"source"', '"note":"\ud800","source"')` + headRow, true},
	}
	ops := append(threadOps(), []badOp{
		{"saver PendingInterrupts", func(ctx context.Context, f *badFixture) error {
			_, _, err := f.app.Saver.PendingInterrupts(ctx, checkpoint.InterruptQuery{Limit: 1000})
			return err
		}},
	}...)
	var cases []badCase
	for _, e := range edits {
		for _, op := range ops {
			if op.name == "saver PendingInterrupts" && !strings.Contains(e.name, "interrupt") {
				continue // the inbox reads interrupt writes, not checkpoints
			}
			cases = append(cases, badCase{name: e.name + "/" + op.name, setup: badRows(e.sql, e.fix), call: op.call, check: corruptAt("wait")})
		}
	}
	runBadCases(t, cases)
}

// rowPrice is the state of the float case.
type rowPrice struct {
	Price float64
	Name  string
}

// TestBadInputInexactValues (item 8): a stored float64 holding text that
// json.Marshal never writes for one (it would read back rounded), a tool
// argument or approval edit with the escape of a lone surrogate (decoded
// as U+FFFD, it would hash as "\ufffd" does), a float argument a float64
// cannot hold, and answers or questions whose JSON (a json.RawMessage)
// has a duplicate key or a lone surrogate: each is refused with a typed
// error where it is taken in, and nothing is written.
func TestBadInputInexactValues(t *testing.T) {
	var priced *graph.Runnable[rowPrice]
	setupPriced := func(ctx context.Context, f *badFixture) error {
		g := graph.New[rowPrice]().
			AddNode("p", func(ctx context.Context, s rowPrice) (graph.Update[rowPrice], error) {
				return graph.Set(rowPrice{Price: 1.5}, "Price"), nil
			}).
			AddNode("ask", func(ctx context.Context, s rowPrice) (graph.Update[rowPrice], error) {
				n, err := interrupt.Ask[string](ctx, "name?")
				return graph.Set(rowPrice{Name: n}, "Name"), err
			}).
			AddEdge(graph.START, "p").AddEdge("p", "ask")
		r, err := g.Compile(graph.WithSaver(f.app.Saver))
		if err != nil {
			return err
		}
		if _, err := r.Invoke(ctx, "priced", graph.Update[rowPrice]{}); err != nil {
			return err
		}
		if err := badEdit(ctx, f.db, "priced", `"Price":{"value":1.5}`, `"Price":{"value":9007199254740993}`); err != nil {
			return err
		}
		if err := badRechecksum(ctx, f.db, "priced"); err != nil {
			return err
		}
		priced, err = g.Compile(graph.WithSaver(f.app.Saver)) // no decoded state cached
		return err
	}
	var quoteCalls int
	var quotes *nodes.Executor
	setupQuote := func(ctx context.Context, f *badFixture) error {
		type quoteArgs struct {
			Amount float64 `json:"amount"`
		}
		tool, err := nodes.NewTool("quote", "Quote an amount.", func(ctx context.Context, a quoteArgs, env nodes.Env) (float64, error) {
			quoteCalls++
			return a.Amount, nil
		})
		if err != nil {
			return err
		}
		quotes, err = nodes.NewExecutor([]*nodes.Tool{tool})
		return err
	}
	argsErr := func(path string) func(error) string {
		return asErr(func(e *nodes.ArgsError) string {
			if !errors.Is(e, nodes.ErrInvalidArgs) || e.Path != path {
				return fmt.Sprintf("ArgsError at %q, want %q", e.Path, path)
			}
			return ""
		})
	}
	notSerializable := func(err error) string {
		if errors.Is(err, interrupt.ErrNotSerializable) || errors.Is(err, graph.ErrNotSerializable) {
			return ""
		}
		return "want an error matching ErrNotSerializable"
	}
	cases := []badCase{
		{name: "stored float64 that rounds/GetState", setup: setupPriced, call: func(ctx context.Context, f *badFixture) error {
			_, err := priced.GetState(ctx, "priced")
			return err
		}, check: corruptAt("priced")},
		{name: "stored float64 that rounds/Resume", setup: setupPriced, call: func(ctx context.Context, f *badFixture) error {
			_, err := priced.Resume(ctx, "priced", graph.Command[rowPrice]{Resume: "n"})
			return err
		}, check: corruptAt("priced")},
		{name: "tool argument lone surrogate", call: func(ctx context.Context, f *badFixture) error {
			_, err := f.ex.Execute(ctx, nodes.Call{Tool: "pay", Args: json.RawMessage(`{"order":"A-\ud800","amount":5}`), Scope: "t"})
			if *f.payCalls != 0 {
				return fmt.Errorf("pay ran (%v)", err)
			}
			return err
		}, check: argsErr("$.order")},
		{name: "tool argument float64 that rounds", setup: setupQuote, call: func(ctx context.Context, f *badFixture) error {
			_, err := quotes.Execute(ctx, nodes.Call{Tool: "quote", Args: json.RawMessage(`{"amount":9007199254740993}`), Scope: "t"})
			if quoteCalls != 0 {
				return fmt.Errorf("quote ran (%v)", err)
			}
			return err
		}, check: argsErr("$.amount")},
		{name: "approval edit lone surrogate", call: func(ctx context.Context, f *badFixture) error {
			_, err := f.app.Inbox.Decide(ctx, f.approval, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(`{"order":"A-\udc00","amount":5}`)})
			return err
		}, check: approvalErr(approval.ErrInvalidArgs)},
		{name: "resume answer duplicate key", call: resume("wait", graph.Command[badState]{Resume: json.RawMessage(`{"a":1,"a":2}`)}), check: notSerializable},
		{name: "resume answer lone surrogate", call: resume("wait", graph.Command[badState]{Resume: json.RawMessage(`"\ud800"`)}), check: notSerializable},
	}
	for _, v := range []struct {
		name string
		v    json.RawMessage
	}{{"duplicate key", json.RawMessage(`{"a":1,"a":2}`)}, {"lone surrogate", json.RawMessage(`"\ud800"`)}} {
		cases = append(cases, askCase("Ask json.RawMessage with a "+v.name, v.v, notSerializable))
	}
	runBadCases(t, cases)
}
