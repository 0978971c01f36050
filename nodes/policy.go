package nodes

import (
	"encoding/json"

	"github.com/lockstepgo/lockstep/approval"
)

// Verdict is a policy's answer for one call: whether it needs a human, and
// the rule and risk to show the reviewer.
type Verdict struct {
	Need bool
	Rule string
	Risk approval.Risk
}

// Policy decides deterministically which calls need a human. It sees what
// the tool declared at registration (never what a call claims about
// itself) and the canonical arguments, and must not block or fail: a
// policy that panics denies. It must be safe for concurrent use.
type Policy interface {
	Gate(tool ToolInfo, args json.RawMessage) Verdict
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(tool ToolInfo, args json.RawMessage) Verdict

// Gate calls f.
func (f PolicyFunc) Gate(tool ToolInfo, args json.RawMessage) Verdict { return f(tool, args) }

// RuleDestructive is the rule name of DenyDestructive's verdicts.
const RuleDestructive = "destructive"

// DenyDestructive returns the default policy: every call of a destructive
// tool needs a human; nothing else does. An executor without a policy
// uses it.
func DenyDestructive() Policy {
	return PolicyFunc(func(t ToolInfo, _ json.RawMessage) Verdict {
		if t.Destructive {
			return Verdict{Need: true, Rule: RuleDestructive, Risk: t.Risk}
		}
		return Verdict{Risk: t.Risk}
	})
}

// AlwaysApprove returns a policy that gates nothing: destructive tools run
// without a human. Use it in tests and trusted batch jobs only.
func AlwaysApprove() Policy {
	return PolicyFunc(func(t ToolInfo, _ json.RawMessage) Verdict { return Verdict{Risk: t.Risk} })
}

// RulesPolicy gates calls with approval.Rules: the declared risk tier at or
// above Rules.MinRisk, or an argument rule that names the call. Its Rules
// also give the tool node the requests' lifetime and owners.
type RulesPolicy struct {
	Rules approval.Rules
}

// FromRules returns a RulesPolicy over r.
func FromRules(r approval.Rules) RulesPolicy { return RulesPolicy{Rules: r} }

// Gate implements Policy.
func (p RulesPolicy) Gate(t ToolInfo, args json.RawMessage) Verdict {
	need, rule := p.Rules.Requires(t.Name, t.Risk, args)
	return Verdict{Need: need, Rule: rule, Risk: t.Risk}
}
