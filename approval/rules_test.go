package approval_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// TestRulesRequires pins the gate's lookup: the declared tier, argument
// rules first, and typos failing closed.
func TestRulesRequires(t *testing.T) {
	overLimit := func(tool string, args json.RawMessage) string {
		var a struct{ Amount int }
		if tool == "refund" && json.Unmarshal(args, &a) == nil && a.Amount > 100 {
			return "refund-over-100"
		}
		return ""
	}
	def := approval.Rules{ArgRules: []approval.ArgRule{overLimit}}
	medium := approval.Rules{MinRisk: approval.RiskMedium}
	tests := []struct {
		name     string
		rules    approval.Rules
		tool     string
		risk     approval.Risk
		args     string
		want     bool
		wantRule string
	}{
		{"read", def, "lookup_order", approval.RiskNone, `{}`, false, ""},
		{"small refund", def, "refund", approval.RiskLow, `{"amount":40}`, false, ""},
		{"large refund", def, "refund", approval.RiskLow, `{"amount":400}`, true, "refund-over-100"},
		{"one-way door", def, "delete_account", approval.RiskHigh, `{}`, true, "risk:high"},
		{"critical", def, "wire", approval.RiskCritical, `{}`, true, "risk:critical"},
		{"medium by default", def, "reindex", approval.RiskMedium, `{}`, false, ""},
		{"medium when asked", medium, "reindex", approval.RiskMedium, `{}`, true, "risk:medium"},
		{"typo fails closed", def, "reindex", "HIGH", `{}`, true, "risk:HIGH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, rule := tc.rules.Requires(tc.tool, tc.risk, json.RawMessage(tc.args))
			if got != tc.want || rule != tc.wantRule {
				t.Errorf("Requires = %v, %q; want %v, %q", got, rule, tc.want, tc.wantRule)
			}
		})
	}
	r := approval.Rules{TTL: time.Minute, Owners: map[string]string{"refund": "payments"}, Owner: "ops"}
	if r.TTLOrDefault() != time.Minute || (approval.Rules{}).TTLOrDefault() != 24*time.Hour {
		t.Error("TTLOrDefault")
	}
	if r.OwnerOf("refund") != "payments" || r.OwnerOf("other") != "ops" {
		t.Error("OwnerOf")
	}
}
