package sim

// Reading a scenario: Load and LoadFile, its defaults (WithDefaults), and
// its validation (Validate), with the errors that name the field at fault.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// Load reads a JSON scenario from r, refusing unknown fields, and
// validates it.
func Load(r io.Reader) (Scenario, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return Scenario{}, fmt.Errorf("sim: scenario: %w", err)
	}
	if dec.More() {
		return Scenario{}, errors.New("sim: scenario: trailing data after the scenario object")
	}
	if err := s.Validate(); err != nil {
		return Scenario{}, err
	}
	return s, nil
}

// LoadFile reads a JSON scenario file; see Load.
func LoadFile(path string) (Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("sim: %w", err)
	}
	s, err := Load(bytes.NewReader(b))
	if err != nil {
		return Scenario{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// FieldError is a scenario field with a bad value.
type FieldError struct {
	Field   string // path of the field, as in the file: "queues[0].outcome.retryable"
	Problem string
}

func (e *FieldError) Error() string { return "sim: scenario: " + e.Field + ": " + e.Problem }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// WithDefaults returns s with every unset optional field at its default.
func (s Scenario) WithDefaults() Scenario {
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Profile == "" {
		s.Profile = membroker.Version(0).String()
	}
	if s.Topology.RetryGranularity == 0 {
		s.Topology.RetryGranularity = Duration(time.Second)
	}
	if s.Topology.DeferredGranularity == 0 {
		s.Topology.DeferredGranularity = Duration(time.Second)
	}
	if !s.Timing.Exact {
		if s.Timing.Latency == 0 {
			s.Timing.Latency = Duration(DefaultLatency)
		}
		if s.Timing.TimerSlack == 0 {
			s.Timing.TimerSlack = Duration(DefaultTimerSlack)
		}
		if s.Timing.QuorumTick == 0 {
			s.Timing.QuorumTick = Duration(5 * time.Second)
		}
		if s.Timing.ClassicSync == 0 {
			s.Timing.ClassicSync = Duration(DefaultClassicSync)
		}
		if s.Timing.QuorumRegister == 0 {
			s.Timing.QuorumRegister = Duration(DefaultQuorumRegister)
		}
		if s.Timing.StopSpan == 0 {
			s.Timing.StopSpan = Duration(DefaultStopSpan)
		}
		if s.Timing.BootSpan == 0 && s.Profile == membroker.RabbitMQ40.String() {
			s.Timing.BootSpan = Duration(DefaultBootSpan40)
		}
		if s.Timing.DeadLetterResend == 0 {
			s.Timing.DeadLetterResend = Duration(DefaultDeadLetterResend)
		}
	}
	qs := make([]Queue, len(s.Queues))
	for i, q := range s.Queues {
		if q.Name == "" && i == 0 {
			q.Name = "jobs"
		}
		if q.Type == "" {
			q.Type = "classic"
		}
		if q.MaxPriority == nil {
			q.MaxPriority = new(queuey.DefaultMaxPriority)
		}
		if q.Workers == 0 {
			q.Workers = 4
		}
		if q.Prefetch == 0 {
			q.Prefetch = 10
		}
		if q.Retry.Jitter == "" {
			q.Retry.Jitter = "full"
		}
		// queuey's own defaults, written out so a report shows them.
		def := queuey.RetryPolicy{Base: q.Retry.Base.D(), Cap: q.Retry.Cap.D(), MaxAttempts: q.Retry.MaxAttempts}.WithDefaults()
		q.Retry.Base, q.Retry.Cap, q.Retry.MaxAttempts = Duration(def.Base), Duration(def.Cap), def.MaxAttempts
		if q.Outcome.Correlation == "" {
			q.Outcome.Correlation = PerAttempt
		}
		if q.Outcome.RetryAfter == (Dist{}) {
			q.Outcome.RetryAfter = Dist{Dist: DistConstant, Value: Duration(30 * time.Second)}
		}
		q.Outcome.RetryAfter = q.Outcome.RetryAfter.withDefaults()
		q.Outcome.Handler = q.Outcome.Handler.withDefaults()
		as := make([]Arrival, len(q.Arrivals))
		for j, a := range q.Arrivals {
			if a.End == 0 {
				a.End = s.Duration
			}
			as[j] = a
		}
		q.Arrivals = as
		qs[i] = q
	}
	s.Queues = qs
	fs := make([]Fault, len(s.Faults))
	for i, f := range s.Faults {
		if f.Queue == "" && len(s.Queues) > 0 {
			f.Queue = qs[0].Name
		}
		if f.Restart == 0 {
			f.Restart = Duration(time.Second)
		}
		if f.For == 0 {
			f.For = Duration(time.Minute)
		}
		fs[i] = f
	}
	s.Faults = fs
	if s.Periodic != nil {
		p := *s.Periodic
		if p.Processes == 0 {
			p.Processes = 3
		}
		if p.Refresh == 0 {
			p.Refresh = Duration(rabbitmq.DefaultSchedulerRefresh)
		}
		if p.Queue == "" {
			p.Queue = "periodic"
		}
		p.Schedules = slices.Clone(p.Schedules)
		s.Periodic = &p
	}
	return s
}

func (d Dist) withDefaults() Dist {
	if d.Dist == "" {
		d.Dist = DistConstant
	}
	if d.Dist == DistPareto && d.Alpha == 0 {
		d.Alpha = 1.5
	}
	return d
}

// Validate checks s (defaults applied) and returns a *FieldError naming
// the first field at fault.
func (s Scenario) Validate() error {
	s = s.WithDefaults()
	switch {
	case s.Duration <= 0:
		return fieldErr("duration", "must be positive, got %s", s.Duration.D())
	case s.Drain < 0:
		return fieldErr("drain", "must not be negative, got %s", s.Drain.D())
	}
	if _, err := parseProfile(s.Profile); err != nil {
		return fieldErr("profile", "%v", err)
	}
	top := s.Topology.rabbitmq()
	if h := s.Topology.HoldType; h != "" && h != "classic" && h != "quorum" {
		return fieldErr("topology.hold_type", "must be classic or quorum, got %q", h)
	}
	if s.Topology.RetryGranularity < 0 {
		return fieldErr("topology.retry_granularity", "must be positive, got %s", s.Topology.RetryGranularity.D())
	}
	if s.Topology.DeferredGranularity < 0 {
		return fieldErr("topology.deferred_granularity", "must be positive, got %s", s.Topology.DeferredGranularity.D())
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"latency", s.Timing.Latency}, {"timer_slack", s.Timing.TimerSlack}, {"quorum_tick", s.Timing.QuorumTick},
		{"classic_sync", s.Timing.ClassicSync}, {"quorum_register", s.Timing.QuorumRegister}, {"stop_span", s.Timing.StopSpan},
		{"boot_span", s.Timing.BootSpan}, {"dead_letter_resend", s.Timing.DeadLetterResend}} {
		if f.d < 0 {
			return fieldErr("timing."+f.name, "must not be negative, got %s", f.d.D())
		}
	}
	if len(s.Queues) == 0 {
		return fieldErr("queues", "at least one queue is needed")
	}
	seen := map[string]bool{}
	for i, q := range s.Queues {
		p := fmt.Sprintf("queues[%d]", i)
		if q.Name == "" {
			return fieldErr(p+".name", "is required")
		}
		if err := top.CheckQueueName(q.Name); err != nil {
			return fieldErr(p+".name", "%v", strings.TrimPrefix(err.Error(), "rabbitmq: "))
		}
		if seen[q.Name] {
			return fieldErr(p+".name", "%q is used twice", q.Name)
		}
		seen[q.Name] = true
		cfg, err := q.config()
		if err != nil {
			return fieldErr(p+".type", "%v", err)
		}
		if *q.MaxPriority < 0 || *q.MaxPriority > 255 {
			return fieldErr(p+".max_priority", "must be within 0..255, got %d", *q.MaxPriority)
		}
		if q.Retry.Base < 0 {
			return fieldErr(p+".retry.base", "must not be negative, got %s", q.Retry.Base.D())
		}
		if q.Retry.Cap < 0 {
			return fieldErr(p+".retry.cap", "must not be negative, got %s", q.Retry.Cap.D())
		}
		if _, err := parseJitter(q.Retry.Jitter); err != nil {
			return fieldErr(p+".retry.jitter", "%v", err)
		}
		if q.Workers < 0 {
			return fieldErr(p+".workers", "must not be negative, got %d", q.Workers)
		}
		if q.Prefetch < 1 || q.Prefetch > 2000 {
			return fieldErr(p+".prefetch", "must be within 1..2000, got %d", q.Prefetch)
		}
		if q.Timeout < 0 {
			return fieldErr(p+".timeout", "must not be negative, got %s", q.Timeout.D())
		}
		if err := cfg.Validate(); err != nil {
			return fieldErr(p+".retry", "%v", strings.TrimPrefix(err.Error(), "queuey: "))
		}
		if len(q.Arrivals) == 0 {
			return fieldErr(p+".arrivals", "at least one arrival process is needed")
		}
		for j, a := range q.Arrivals {
			ap := fmt.Sprintf("%s.arrivals[%d]", p, j)
			if err := a.validate(ap); err != nil {
				return err
			}
			for k, rj := range a.Jobs {
				if rj.At >= s.Duration {
					return fieldErr(fmt.Sprintf("%s.jobs[%d].at", ap, k), "%s is not before the scenario's duration %s: it would never arrive", rj.At.D(), s.Duration.D())
				}
			}
		}
		if err := q.Outcome.validate(p + ".outcome"); err != nil {
			return err
		}
	}
	for i, f := range s.Faults {
		p := fmt.Sprintf("faults[%d]", i)
		if f.At < 0 {
			return fieldErr(p+".at", "must not be negative, got %s", f.At.D())
		}
		var q *Queue
		for k := range s.Queues {
			if s.Queues[k].Name == f.Queue {
				q = &s.Queues[k]
			}
		}
		if q == nil {
			return fieldErr(p+".queue", "no queue is named %q", f.Queue)
		}
		if f.Scheduler {
			switch {
			case f.Kind != FaultCrash && f.Kind != FaultDrop:
				return fieldErr(p+".scheduler", "only a crash or a drop hits a scheduler process, not %q", f.Kind)
			case s.Periodic == nil:
				return fieldErr(p+".scheduler", "the scenario has no periodic section")
			case f.Worker < 0 || f.Worker >= s.Periodic.Processes:
				return fieldErr(p+".worker", "the scheduler processes are 0..%d, got %d", s.Periodic.Processes-1, f.Worker)
			case f.Restart < 0:
				return fieldErr(p+".restart", "must not be negative, got %s", f.Restart.D())
			}
			continue
		}
		switch f.Kind {
		case FaultCrash, FaultDrop:
			if f.Worker < 0 || f.Worker >= q.Workers {
				return fieldErr(p+".worker", "queue %q has workers 0..%d, got %d", q.Name, q.Workers-1, f.Worker)
			}
			if f.Restart < 0 {
				return fieldErr(p+".restart", "must not be negative, got %s", f.Restart.D())
			}
		case FaultRestart, FaultKill:
			if f.Restart < 0 {
				return fieldErr(p+".restart", "must not be negative, got %s", f.Restart.D())
			}
		case FaultOutage:
			if f.For < 0 {
				return fieldErr(p+".for", "must not be negative, got %s", f.For.D())
			}
		case FaultRefuseHold:
			if f.TTL <= 0 {
				return fieldErr(p+".ttl", "must be positive, got %s", f.TTL.D())
			}
			if f.For < 0 {
				return fieldErr(p+".for", "must not be negative, got %s", f.For.D())
			}
		case "":
			return fieldErr(p+".kind", "is required: crash, drop, refuse-hold, restart or outage")
		default:
			return fieldErr(p+".kind", "unknown fault %q: want crash, drop, refuse-hold, restart or outage", f.Kind)
		}
	}
	if s.Periodic != nil {
		taken := map[string]bool{}
		for name := range seen {
			taken[name], taken[top.DeadQueue(name)] = true, true
		}
		if err := s.Periodic.validate(taken, top); err != nil {
			return err
		}
	}
	return nil
}

// validate checks a periodic section; taken are the names of the work
// queues and their dead-letter queues.
func (p *Periodic) validate(taken map[string]bool, top rabbitmq.Topology) error {
	switch {
	case p.Processes < 1 || p.Processes > 64:
		return fieldErr("periodic.processes", "must be within 1..64, got %d", p.Processes)
	case p.Refresh < Duration(time.Second) || p.Refresh > Duration(10*time.Minute):
		return fieldErr("periodic.refresh", "must be within 1s..10m, got %s", p.Refresh.D())
	case taken[p.Queue] || taken[top.DeadQueue(p.Queue)]:
		return fieldErr("periodic.queue", "%q or its dead-letter queue is a queue of the scenario's work queues", p.Queue)
	case taken[electionQueue] || p.Queue == electionQueue || top.DeadQueue(p.Queue) == electionQueue:
		return fieldErr("periodic.queue", "%q is the scheduler group's election queue, which no other queue may be named", electionQueue)
	case len(p.Schedules) == 0:
		return fieldErr("periodic.schedules", "at least one schedule is needed")
	}
	if err := top.CheckQueueName(p.Queue); err != nil {
		return fieldErr("periodic.queue", "%v", strings.TrimPrefix(err.Error(), "rabbitmq: "))
	}
	names := map[string]bool{}
	for i, sc := range p.Schedules {
		f := fmt.Sprintf("periodic.schedules[%d]", i)
		switch {
		case sc.Name == "" || len(sc.Name) > 200 || !utf8.ValidString(sc.Name):
			return fieldErr(f+".name", "must be 1 to 200 bytes of UTF-8, got %q", sc.Name)
		case names[sc.Name]:
			return fieldErr(f+".name", "%q is used twice", sc.Name)
		case sc.Every < Duration(time.Second) || sc.Every%Duration(time.Second) != 0:
			return fieldErr(f+".every", "must be a whole number of seconds, at least one, got %s", sc.Every.D())
		case sc.Offset < 0 || sc.Offset >= sc.Every || sc.Offset%Duration(time.Second) != 0:
			return fieldErr(f+".offset", "must be a whole number of seconds, from 0 to less than every, got %s", sc.Offset.D())
		}
		names[sc.Name] = true
	}
	return nil
}

func (a Arrival) validate(p string) error {
	if a.Start < 0 {
		return fieldErr(p+".start", "must not be negative, got %s", a.Start.D())
	}
	if a.End < a.Start {
		return fieldErr(p+".end", "%s is before start %s", a.End.D(), a.Start.D())
	}
	switch a.Process {
	case ArrivalConstant, ArrivalPoisson:
		if !(a.Rate > 0) || math.IsInf(a.Rate, 0) {
			return fieldErr(p+".rate", "must be a positive number of jobs per second, got %v", a.Rate)
		}
	case ArrivalBurst:
		if a.Every <= 0 {
			return fieldErr(p+".every", "must be positive, got %s", a.Every.D())
		}
		if a.Size < 1 {
			return fieldErr(p+".size", "must be at least 1, got %d", a.Size)
		}
	case ArrivalReplay:
		if len(a.Jobs) == 0 {
			return fieldErr(p+".jobs", "a replay needs at least one job")
		}
		for i, j := range a.Jobs {
			jp := fmt.Sprintf("%s.jobs[%d]", p, i)
			if j.At < 0 {
				return fieldErr(jp+".at", "must not be negative, got %s", j.At.D())
			}
			if j.RetryAfter < 0 {
				return fieldErr(jp+".retry_after", "must not be negative, got %s", j.RetryAfter.D())
			}
			if j.Handler < 0 {
				return fieldErr(jp+".handler", "must not be negative, got %s", j.Handler.D())
			}
			for k, o := range j.Outcomes {
				if _, ok := replayOutcomes[o]; !ok {
					return fieldErr(fmt.Sprintf("%s.outcomes[%d]", jp, k), "unknown outcome %q: want ok, retry, fatal, defer or crash", o)
				}
			}
		}
	case "":
		return fieldErr(p+".process", "is required: constant, poisson, burst or replay")
	default:
		return fieldErr(p+".process", "unknown process %q: want constant, poisson, burst or replay", a.Process)
	}
	return nil
}

func (o Outcome) validate(p string) error {
	rates := []struct {
		name string
		v    float64
	}{{"retryable", o.Retryable}, {"fatal", o.Fatal}, {"rate_limited", o.RateLimited}, {"poison", o.Poison}, {"malformed", o.Malformed}, {"ignore_context", o.IgnoreContext}}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) {
			return fieldErr(p+"."+r.name, "must be a fraction within 0..1, got %v", r.v)
		}
	}
	if sum := o.Retryable + o.Fatal + o.RateLimited; sum > 1+1e-9 {
		return fieldErr(p, "retryable + fatal + rate_limited is %v, over 1", sum)
	}
	if o.Correlation != PerAttempt && o.Correlation != PerJob {
		return fieldErr(p+".correlation", "unknown correlation %q: want attempt or job", o.Correlation)
	}
	if err := o.RetryAfter.validate(p + ".retry_after"); err != nil {
		return err
	}

	return o.Handler.validate(p + ".handler")
}

func (d Dist) validate(p string) error {
	switch d.Dist {
	case DistConstant:
		if d.Value < 0 {
			return fieldErr(p+".value", "must not be negative, got %s", d.Value.D())
		}
	case DistUniform:
		if d.Min < 0 || d.Max < d.Min {
			return fieldErr(p, "uniform needs 0 <= min <= max, got min %s max %s", d.Min.D(), d.Max.D())
		}
	case DistExponential:
		if d.Mean <= 0 {
			return fieldErr(p+".mean", "must be positive, got %s", d.Mean.D())
		}
	case DistPareto:
		if d.Mean <= 0 {
			return fieldErr(p+".mean", "must be positive, got %s", d.Mean.D())
		}
		if !(d.Alpha > 1) {
			return fieldErr(p+".alpha", "must be over 1, got %g", d.Alpha)
		}
	default:
		return fieldErr(p+".dist", "unknown distribution %q: want constant, uniform, exponential or pareto", d.Dist)
	}
	return nil
}

var replayOutcomes = map[string]struct{}{"ok": {}, "retry": {}, "fatal": {}, "defer": {}, "crash": {}}

func parseProfile(s string) (membroker.Version, error) {
	switch s {
	case "RabbitMQ40":
		return membroker.RabbitMQ40, nil
	case "RabbitMQ43":
		return membroker.RabbitMQ43, nil
	}
	return 0, fmt.Errorf("unknown profile %q: want RabbitMQ40 or RabbitMQ43", s)
}

func parseJitter(s string) (queuey.Jitter, error) {
	switch s {
	case "full":
		return queuey.FullJitter, nil
	case "equal":
		return queuey.EqualJitter, nil
	case "none":
		return queuey.NoJitter, nil
	}
	return 0, fmt.Errorf("unknown jitter %q: want full, equal or none", s)
}

// config is the queue's queuey definition (defaults applied).
func (q Queue) config() (queuey.QueueConfig, error) {
	var typ queuey.QueueType
	switch q.Type {
	case "classic":
		typ = queuey.Classic
	case "quorum":
		typ = queuey.Quorum
	default:
		return queuey.QueueConfig{}, fmt.Errorf("unknown queue type %q: want classic or quorum", q.Type)
	}
	j, _ := parseJitter(q.Retry.Jitter)
	mp := 0
	if q.MaxPriority != nil {
		mp = min(max(*q.MaxPriority, 0), 255)
	}
	return queuey.QueueConfig{
		Name: q.Name, Type: typ, Prefetch: q.Prefetch, MaxPriority: new(uint8(mp)), Timeout: q.Timeout.D(),
		Retry: queuey.RetryPolicy{Base: q.Retry.Base.D(), Cap: q.Retry.Cap.D(), MaxAttempts: q.Retry.MaxAttempts, Jitter: j},
	}.WithDefaults(), nil
}
