package sqlite

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// latestQuery is the query the package documentation shows.
const latestQuery = `SELECT t.thread_id, t.step, t.source, t.updated_at, c.checkpoint_id, c.metadata, c.versions
FROM threads t
JOIN checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns
                  AND c.checkpoint_id = t.head_checkpoint_id
WHERE t.checkpoint_ns = ''
ORDER BY t.updated_at DESC;`

// TestReadableWithTheShell: the documented query lists every thread's
// latest checkpoint, through database/sql and through the stock sqlite3
// shell (when installed), and the JSON columns read as text there.
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
		var th, src, upd, id, meta, vers string
		var step int
		if err := rows.Scan(&th, &step, &src, &upd, &id, &meta, &vers); err != nil {
			t.Fatal(err)
		}
		got[th] = id
	}
	rows.Close()
	if got["alpha"] != a.head || got["beta"] != b.head || len(got) != 2 {
		t.Fatalf("latest checkpoints %v, want alpha %s beta %s", got, a.head, b.head)
	}
	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 shell not installed")
	}
	closeChecked(t, s)
	out, err := exec.Command(shell, "-readonly", path, latestQuery, "SELECT value FROM blobs WHERE channel = 'Log' LIMIT 1;").CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"alpha|2|loop|", a.head, `"source":"loop"`, `"Log":"`, `["item 0"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("shell output lacks %q:\n%s", want, text)
		}
	}
}
