package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLoadFileReadsTheExample(t *testing.T) {
	s, err := LoadFile("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Duration.D() != 10*time.Minute || s.Queues[0].Outcome.RetryAfter.Value.D() != 30*time.Second || len(s.Faults) != 1 {
		t.Fatalf("%+v", s)
	}
}

// TestLoadRefusesBadScenarios: every bad input gets an error naming the
// field and the problem.
func TestLoadRefusesBadScenarios(t *testing.T) {
	q := `"queues":[{"arrivals":[{"process":"constant","rate":1}]}]`
	for _, c := range []struct{ body, field, problem string }{
		{`{"duration":"1m",` + q + `,"color":"red"}`, "", `unknown field "color"`},
		{`{"duration":60,` + q + `}`, "", `want a duration string`},
		{`{"duration":"1 minute",` + q + `}`, "", `bad duration "1 minute"`},
		{`{` + q + `}`, "duration", "must be positive"},
		{`{"duration":"1m"}`, "queues", "at least one queue"},
		{`{"duration":"1m","profile":"RabbitMQ39",` + q + `}`, "profile", `unknown profile "RabbitMQ39"`},
		{`{"duration":"1m","topology":{"retry_granularity":"-1s"},` + q + `}`, "topology.retry_granularity", "must be positive"},
		{`{"duration":"1m","queues":[{"arrivals":[{"process":"constant","rate":-5}]}]}`, "queues[0].arrivals[0].rate", "must be a positive number"},
		{`{"duration":"1m","queues":[{"arrivals":[{"process":"often"}]}]}`, "queues[0].arrivals[0].process", `unknown process "often"`},
		{`{"duration":"1m","queues":[{"arrivals":[]}]}`, "queues[0].arrivals", "at least one arrival"},
		{`{"duration":"1m","queues":[{"type":"stream","arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].type", `unknown queue type "stream"`},
		{`{"duration":"1m","queues":[{"name":"amq.x","arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].name", "reserved"},
		{`{"duration":"1m","queues":[{"prefetch":-1,"arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].prefetch", "within 1..2000"},
		{`{"duration":"1m","queues":[{"outcome":{"retryable":0.8,"fatal":0.3},"arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].outcome", "over 1"},
		{`{"duration":"1m","queues":[{"outcome":{"fatal":-0.1},"arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].outcome.fatal", "within 0..1"},
		{`{"duration":"1m","queues":[{"outcome":{"handler":{"dist":"weibull"}},"arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].outcome.handler.dist", `unknown distribution "weibull"`},
		{`{"duration":"1m","queues":[{"retry":{"base":"1m","cap":"1s"},"arrivals":[{"process":"constant","rate":1}]}]}`, "queues[0].retry", "Cap"},
		{`{"duration":"1m","queues":[{"arrivals":[{"process":"replay","jobs":[{"at":"1s","outcomes":["maybe"]}]}]}]}`, "queues[0].arrivals[0].jobs[0].outcomes[0]", `unknown outcome "maybe"`},
		{`{"duration":"1m",` + q + `,"faults":[{"at":"1s","kind":"meteor"}]}`, "faults[0].kind", `unknown fault "meteor"`},
		{`{"duration":"1m",` + q + `,"faults":[{"at":"1s","kind":"crash","worker":9}]}`, "faults[0].worker", "workers 0..3"},
		{`{"duration":"1m",` + q + `,"faults":[{"at":"1s","kind":"refuse-hold"}]}`, "faults[0].ttl", "must be positive"},
		{`{"duration":"1m",` + q + `,"periodic":{}}`, "periodic.schedules", "at least one schedule"},
		{`{"duration":"1m",` + q + `,"periodic":{"processes":-1,"schedules":[{"name":"a","every":"1s"}]}}`, "periodic.processes", "within 1..64"},
		{`{"duration":"1m",` + q + `,"periodic":{"refresh":"1h","schedules":[{"name":"a","every":"1s"}]}}`, "periodic.refresh", "within 1s..10m"},
		{`{"duration":"1m",` + q + `,"periodic":{"queue":"jobs","schedules":[{"name":"a","every":"1s"}]}}`, "periodic.queue", "work queues"},
		{`{"duration":"1m",` + q + `,"periodic":{"queue":"jobs.dead","schedules":[{"name":"a","every":"1s"}]}}`, "periodic.queue", "work queues"},
		{`{"duration":"1m",` + q + `,"periodic":{"queue":"queuey.scheduler.sim","schedules":[{"name":"a","every":"1s"}]}}`, "periodic.queue", "election queue"},
		{`{"duration":"1m","queues":[{"name":"queuey.scheduler.sim","arrivals":[{"process":"constant","rate":1}]}],"periodic":{"schedules":[{"name":"a","every":"1s"}]}}`, "periodic.queue", "election queue"},
		{`{"duration":"1m",` + q + `,"periodic":{"queue":"amq.x","schedules":[{"name":"a","every":"1s"}]}}`, "periodic.queue", "reserved"},
		{`{"duration":"1m",` + q + `,"periodic":{"schedules":[{"every":"1s"}]}}`, "periodic.schedules[0].name", "1 to 200 bytes"},
		{`{"duration":"1m",` + q + `,"periodic":{"schedules":[{"name":"a","every":"1s"},{"name":"a","every":"2s"}]}}`, "periodic.schedules[1].name", "used twice"},
		{`{"duration":"1m",` + q + `,"periodic":{"schedules":[{"name":"a","every":"1500ms"}]}}`, "periodic.schedules[0].every", "whole number of seconds"},
		{`{"duration":"1m",` + q + `,"periodic":{"schedules":[{"name":"a","every":"10s","offset":"10s"}]}}`, "periodic.schedules[0].offset", "less than every"},
		{`{"duration":"1m",` + q + `,"faults":[{"at":"1s","kind":"crash","scheduler":true}]}`, "faults[0].scheduler", "no periodic section"},
		{`{"duration":"1m",` + q + `,"periodic":{"schedules":[{"name":"a","every":"1s"}]},"faults":[{"at":"1s","kind":"kill","scheduler":true}]}`, "faults[0].scheduler", "only a crash or a drop"},
		{`{"duration":"1m",` + q + `,"periodic":{"schedules":[{"name":"a","every":"1s"}]},"faults":[{"at":"1s","kind":"drop","scheduler":true,"worker":3}]}`, "faults[0].worker", "processes are 0..2"},
	} {
		_, err := Load(strings.NewReader(c.body))
		if err == nil {
			t.Errorf("%s: no error", c.body)
			continue
		}
		var fe *FieldError
		if c.field != "" {
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("%s: error %q, want one for field %q", c.body, err, c.field)
				continue
			}
		}
		if !strings.Contains(err.Error(), c.problem) {
			t.Errorf("%s: error %q does not say %q", c.body, err, c.problem)
		}
	}
}

func TestLoadFileMissing(t *testing.T) {
	if _, err := LoadFile("testdata/no-such-file.json"); err == nil || !strings.Contains(err.Error(), "no-such-file.json") {
		t.Fatalf("err = %v", err)
	}
}

func TestReplayArrivalAfterTheDurationIsRefused(t *testing.T) {
	_, err := Load(strings.NewReader(`{"duration":"1m","queues":[{"arrivals":[{"process":"replay","jobs":[{"at":"10s"},{"at":"2m"}]}]}]}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "queues[0].arrivals[0].jobs[1].at" || !strings.Contains(fe.Problem, "never arrive") {
		t.Fatalf("err = %v", err)
	}
}

func TestWithDefaultsWritesOutTheRetryPolicy(t *testing.T) {
	s := Scenario{Duration: Duration(time.Minute), Queues: []Queue{{Arrivals: []Arrival{{Process: ArrivalConstant, Rate: 1}}}}}.WithDefaults()
	if r := s.Queues[0].Retry; r.Base.D() != time.Second || r.Cap.D() != 5*time.Minute || r.MaxAttempts != 10 || r.Jitter != "full" {
		t.Fatalf("retry defaults: %+v", r)
	}
}

// A schedule's name must be UTF-8, as rabbitmq.NewScheduler requires: a
// scenario built in Go can carry any bytes, which JSON cannot.
func TestValidateRefusesAScheduleNameNotUTF8(t *testing.T) {
	s := Scenario{Duration: Duration(time.Minute), Queues: []Queue{{Arrivals: []Arrival{{Process: ArrivalConstant, Rate: 1}}}},
		Periodic: &Periodic{Schedules: []Schedule{{Name: "\xff", Every: Duration(time.Second)}}}}
	var fe *FieldError
	if err := s.Validate(); !errors.As(err, &fe) || fe.Field != "periodic.schedules[0].name" {
		t.Fatalf("Validate: %v", err)
	}
}
