package postgres

import (
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/approvaltest"
)

// TestApprovalContract runs the approval stores' shared contract on
// PostgreSQL.
func TestApprovalContract(t *testing.T) {
	testURL(t)
	if _, ok := any(&ApprovalStore{}).(approval.ResumeClaimer); !ok {
		t.Fatal("the Postgres approval store does not implement approval.ResumeClaimer: approvaltest's ResumeClaims would skip")
	}
	approvaltest.Run(t, func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string) {
		db := openTest(t, Config{Now: now, MaxConns: 8})
		return db.Approvals(), nil
	})
}
