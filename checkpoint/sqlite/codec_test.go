package sqlite

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var jsonSeeds = []string{
	`null`, `true`, `false`, `0`, `-0`, `1.5e-3`, `-12E+2`, `01`, `1.`, `.5`, `-`, `1e`, `"a"`, `"\u00e9\n\"\\"`, `"\x"`, "\"\x01\"",
	`"abcdefghijklmnop"`, `"abcdefgh\"ijklmnop"`, "\"abcdefghi\x1fjklmnop\"", `"abcdefghij\njklmnop"`, `"abcdefghijklmnopq`, `["abcdefghijklmnop","é€𝄞 abcdefgh"]`,
	`[]`, `[1,2,[3,{"a":null}]]`, `[1,]`, `{"a":1,"b":[true]}`, `{"a" 1}`, `{,}`, `{"a":1}}`, ` [ 1 , 2 ] `, `[1 2]`, "\"\xff\"", `nul`, `tru`,
}

// FuzzScannerValid: the scanner accepts exactly what json.Valid accepts.
func FuzzScannerValid(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &scanner{b: b}
		err := s.skip()
		if err == nil {
			err = s.end()
		}
		if got, want := err == nil, json.Valid(b); got != want {
			t.Fatalf("scanner %v (%v), json.Valid %v for %q", got, err, want, b)
		}
	})
}

// TestStrStop: strStop reports every word that holds a byte skip must
// look at, wherever it is and whatever the other bytes are.
func TestStrStop(t *testing.T) {
	stops := func(b byte) bool { return b == '"' || b == '\\' || b < 0x20 }
	check := func(w [8]byte) {
		want := false
		for _, b := range w {
			want = want || stops(b)
		}
		if got := strStop(binary.LittleEndian.Uint64(w[:])); want && !got {
			t.Fatalf("strStop(%q) = false, want true", w[:])
		}
	}
	fills := []byte{'a', 0x00, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	for pos := range 8 {
		for b := range 256 {
			for _, fill := range fills {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(b)
				check(w)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 18 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		check(w)
	}
	// A word of plain text is never a stop, or skip would gain nothing.
	if strStop(binary.LittleEndian.Uint64([]byte("abc xyz~"))) {
		t.Error("strStop reports a word of plain text")
	}
}

// FuzzDecodeMetadata: the metadata decoder agrees with
// Metadata.UnmarshalJSON on every input.
func FuzzDecodeMetadata(f *testing.F) {
	for _, s := range []string{
		`{"parents":{},"run_id":"r","source":"loop","step":3}`, `{"parents":{"":"p"},"source":"input","step":-1}`,
		`{"parents":{},"source":"loop","step":3,"topology-fp":"0123456789abcdef0123456789abcdef"}`, `{"topology-fp":5}`,
		`{"step":1.5}`, `{"step":"1"}`, `{"parents":null}`, `{"parents":{"a":1}}`, `{"kind":"x","n":2,"step":0}`,
		`{"step":99999999999999999999}`, `{"source":"l\u006fop","step":1}`, `{"step":1,"step":2}`, `[]`, `{`, `{"step":-}`,
		`{"parents":{},"run_id":"\ud800","source":"loop","step":1}`, `{"parents":{"":null},"source":"loop","step":1}`,
		`{"parents":{},"source":"loop","step":1,"step":1}`, `{"parents":{},"source":"loop"}`, `{"parents":{},"source":null,"step":1}`,
		"{\"parents\":{},\"run_id\":\"\xff\",\"source\":\"loop\",\"step\":1}", `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeMetadata(b)
		var want checkpoint.Metadata
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("decodeMetadata error %v, json.Unmarshal error %v for %q", err, werr, b)
		}
		if err == nil {
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("%q (-json +fast):\n%s", b, d)
			}
		}
	})
}

// TestCodecRoundTrip: what encodeRow writes decodes back to the request
// byte for byte (values with their own whitespace included), with the
// checksum rowCRC computes.
func TestCodecRoundTrip(t *testing.T) {
	req := checkpoint.PutRequest{Thread: "t\"h", NS: "child:1", Checkpoint: checkpoint.Checkpoint{
		ID: "c2", ParentID: "c1", Mark: "c0",
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: 7, Parents: map[string]string{"": "p\n"}, RunID: "run<1>",
			Topology: "0123456789abcdef0123456789abcdef"},
		Versions: map[string]string{"Log": "c2", "N": "c2", "weird \"\\\t name": "c2", "old": "c0"},
		Channels: map[string][]checkpoint.Blob{
			"Log":               {{Version: "c2", Append: true, Base: "c1", Data: json.RawMessage(` [ "a" , {"b":[1, 2]} ] `)}},
			"N":                 {{Version: "c2", Data: json.RawMessage(`-1.5e3`)}},
			"weird \"\\\t name": {{Version: "c2", Data: json.RawMessage(`"\u00e9"`)}},
		},
	}, Lease: checkpoint.Lease{Owner: "o"}, ParentWrites: []checkpoint.TaskWrites{
		{TaskID: "t1", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "Log", Value: json.RawMessage(`["a"]`)}, {Channel: checkpoint.ChannelError, Value: json.RawMessage(` {"message":"x"}`)}}},
		{TaskID: "t2", Node: "", Path: "push:0"},
	}}
	if err := checkpoint.ValidatePut(&req); err != nil {
		t.Fatal(err)
	}
	row, err := encodeRow(&req, schema1Start)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := row.taskWrites.(string)
	if got := rowCRC(req.Thread, req.NS, "c2", "c1", row.step, row.source, row.created, []byte(row.metadata), []byte(row.versions), []byte(row.channels), []byte(tw), "c0", false); got != row.crc {
		t.Fatalf("rowCRC %x, encodeRow %x", got, row.crc)
	}
	meta, err := decodeMetadata([]byte(row.metadata))
	if err != nil || !cmp.Equal(meta, req.Checkpoint.Metadata) {
		t.Fatalf("metadata %+v, %v", meta, err)
	}
	versions, err := decodeVersions([]byte(row.versions))
	if err != nil || !cmp.Equal(versions, req.Checkpoint.Versions) {
		t.Fatalf("versions %v, %v", versions, err)
	}
	chans, err := decodeChannels([]byte(row.channels), "c2")
	if err != nil || len(chans) != 3 {
		t.Fatalf("channels %v, %v", chans, err)
	}
	for _, e := range chans {
		if d := cmp.Diff(req.Checkpoint.Channels[e.channel][0], e.blob); d != "" {
			t.Errorf("channel %q (-put +read):\n%s", e.channel, d)
		}
	}
	ws, err := decodeTaskWrites([]byte(tw), chans)
	if err != nil || len(ws) != 2 {
		t.Fatalf("task writes %v, %v", ws, err)
	}
	if ws[1].idx != -1 || !bytes.Equal(ws[1].w.Value, req.ParentWrites[0].Writes[1].Value) || ws[0].w.TaskID != "t1" || ws[0].w.Path != "pull" ||
		string(ws[0].w.Value) != `["a"]` {
		t.Errorf("task writes %+v", ws)
	}
	// A write equal to what the row stores for its channel is stored once.
	req.ParentWrites[0].Writes[0].Value = req.Checkpoint.Channels["Log"][0].Data
	row, err = encodeRow(&req, schema1Start)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ = row.taskWrites.(string)
	if !strings.Contains(tw, `[["Log"],[`) {
		t.Errorf("task writes %s: the write equal to Log's items is not a reference", tw)
	}
	ws, err = decodeTaskWrites([]byte(tw), chans)
	if err != nil || !bytes.Equal(ws[0].w.Value, req.Checkpoint.Channels["Log"][0].Data) {
		t.Errorf("referring write decodes to %s, %v", ws[0].w.Value, err)
	}
	if _, err := decodeTaskWrites([]byte(`[{"task_id":"t","node":"","path":"","writes":[["Nope"]]}]`), chans); err == nil {
		t.Error("a reference to a channel the row does not hold decodes")
	}
	// Names JSON cannot store exactly are refused, not changed.
	bad := req
	bad.Checkpoint.Versions = map[string]string{"\xff": "c2"}
	if _, err := encodeRow(&bad, schema1Start); !errors.Is(err, checkpoint.ErrInvalid) {
		t.Errorf("invalid UTF-8 channel: %v, want ErrInvalid", err)
	}
}

// FuzzDecodeChannels: the channels decoder never panics, and what it
// accepts re-encodes to input that decodes the same.
func FuzzDecodeChannels(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":{"value":1}}`, `{"a":{"append":[1],"base":"v"}}`, `{"a":{"append":[1]}}`, `{"a":{"value":1,"base":""}}`,
		`{"a":{"value":1},"a":{"value":2}}`, `{"a":{"x":1}}`, `{"a":1}`, `[]`, `{"\ud800":{"value":1}}`, "{\"\xff\":{\"value\":1}}",
		`{"a":{"append":[1],"base":"\udc00"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		chans, err := decodeChannels(b, "v")
		if err != nil {
			return
		}
		m := map[string][]checkpoint.Blob{}
		for _, e := range chans {
			m[e.channel] = []checkpoint.Blob{e.blob}
		}
		if len(m) != len(chans) {
			t.Fatalf("duplicate channels accepted in %q", b)
		}
		enc, err := encodeChannels(nil, m)
		if err != nil {
			return // a name JSON cannot store exactly
		}
		again, err := decodeChannels(enc, "v")
		m2 := map[string][]checkpoint.Blob{}
		for _, e := range again {
			m2[e.channel] = []checkpoint.Blob{e.blob}
		}
		if err != nil || !cmp.Equal(m, m2) {
			t.Fatalf("%q re-encoded as %q decodes to %v, %v", b, enc, again, err)
		}
	})
}

// TestAppendTime: appendTime writes what timeLayout writes.
func TestAppendTime(t *testing.T) {
	for _, tm := range []time.Time{
		time.Unix(0, 0), time.Unix(1750000000, 123456789), time.Date(2025, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", -3600)),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, want := string(appendTime(nil, tm)), formatTime(tm); got != want {
			t.Errorf("appendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}
