package approval_test

import (
	"encoding/json"
	"errors"
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
	if got := (approval.Rules{TTL: -time.Hour}).TTLOrDefault(); got != -time.Hour {
		t.Errorf("TTLOrDefault of a negative TTL = %v, want it as it is (never replaced by the default)", got)
	}
	if r.OwnerOf("refund") != "payments" || r.OwnerOf("other") != "ops" {
		t.Error("OwnerOf")
	}
}

// TestRulesValidate: a rule field out of range is refused with a typed
// error when the rules are configured, never silently replaced by its
// default (a negative TTL used to become 24 h).
func TestRulesValidate(t *testing.T) {
	never := func(string, json.RawMessage) string { return "" }
	tests := []struct {
		name  string
		rules approval.Rules
		bad   bool
	}{
		{"zero value", approval.Rules{}, false},
		{"all set", approval.Rules{MinRisk: approval.RiskMedium, ArgRules: []approval.ArgRule{never}, TTL: time.Hour, Owner: "ops"}, false},
		{"MaxTTL", approval.Rules{TTL: approval.MaxTTL}, false},
		{"negative TTL", approval.Rules{TTL: -time.Hour}, true},
		{"one nanosecond below zero", approval.Rules{TTL: -1}, true},
		{"TTL above MaxTTL", approval.Rules{TTL: approval.MaxTTL + 1}, true},
		{"MinRisk not a tier", approval.Rules{MinRisk: "hihg"}, true},
		{"MinRisk in capitals", approval.Rules{MinRisk: "HIGH"}, true},
		{"nil ArgRule", approval.Rules{ArgRules: []approval.ArgRule{never, nil}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rules.Validate()
			var e *approval.Error
			switch {
			case !tc.bad && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tc.bad && (!errors.Is(err, approval.ErrInvalidConfig) || !errors.As(err, &e)):
				t.Errorf("Validate: %v, want an *approval.Error matching ErrInvalidConfig", err)
			}
		})
	}
}
