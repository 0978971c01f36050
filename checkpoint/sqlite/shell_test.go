package sqlite

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// latestQuery is the query the package documentation shows.
const latestQuery = `SELECT thread_id, checkpoint_id, step, source, updated_at, metadata, versions
FROM thread_heads
WHERE checkpoint_ns = ''
ORDER BY updated_at DESC;`

// channelsQuery is the documentation's query of a thread's stored channel
// versions.
const channelsQuery = `SELECT c.checkpoint_id, j.key AS channel, j.value
FROM checkpoints c, json_each(c.channels) j
WHERE c.thread_id = 'alpha'
ORDER BY c.checkpoint_id, j.key;`

// TestReadableWithTheShell: the documented queries list every thread's
// latest checkpoint and a thread's channel versions, through database/sql
// and through the stock sqlite3 shell (when installed), and the JSON
// columns read as text there.
func TestReadableWithTheShell(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shell.db")
	s := openAt(t, path, Config{})
	a := putLine(t, s, "alpha", 3)
	b := putLine(t, s, "beta", 2)
	rows, err := s.DB().Query(latestQuery)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var th, id, src, upd, meta, vers string
		var step int
		if err := rows.Scan(&th, &id, &step, &src, &upd, &meta, &vers); err != nil {
			t.Fatal(err)
		}
		got[th] = id
	}
	rows.Close()
	if got["alpha"] != a.head || got["beta"] != b.head || len(got) != 2 {
		t.Fatalf("latest checkpoints %v, want alpha %s beta %s", got, a.head, b.head)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM (` + strings.TrimSuffix(channelsQuery, ";") + `)`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("channel versions of alpha: %d, %v; want 6", n, err)
	}
	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 shell not installed")
	}
	closeChecked(t, s)
	out, err := exec.Command(shell, "-readonly", path, latestQuery, channelsQuery).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"alpha|" + a.head + "|2|loop|", `"source":"loop"`, `"Log":"`, `|Log|{"append":["item 0"],"base":""}`, `|N|{"value":2}`} {
		if !strings.Contains(text, want) {
			t.Errorf("shell output lacks %q:\n%s", want, text)
		}
	}
}
