package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

var classColumns = []column[hookd.TrafficClass]{
	{"NAME", func(c hookd.TrafficClass) string { return c.Name }},
	{"BUILTIN", func(c hookd.TrafficClass) string { return fmtBool(c.Builtin) }},
	{"ENFORCE", func(c hookd.TrafficClass) string { return fmtBool(c.Enforce) }},
	{"FAILURE RATE", func(c hookd.TrafficClass) string {
		return strconv.FormatFloat(float64(c.FailureRateThreshold), 'f', 2, 32)
	}},
	{"MIN THROUGHPUT", func(c hookd.TrafficClass) string { return strconv.Itoa(c.MinThroughput) }},
	{"CONSECUTIVE", func(c hookd.TrafficClass) string { return strconv.Itoa(c.ConsecutiveFailures) }},
	{"WINDOW", func(c hookd.TrafficClass) string { return string(c.Window) }},
	{"OPEN", func(c hookd.TrafficClass) string { return string(c.OpenDuration) }},
	{"AUTO TUNE", func(c hookd.TrafficClass) string { return string(c.AutoTune) }},
}

var recommendationColumns = []column[hookd.ClassRecommendation]{
	{"CLASS", func(r hookd.ClassRecommendation) string { return r.Class }},
	{"STATUS", func(r hookd.ClassRecommendation) string { return string(r.Status) }},
	{"AUTO TUNE", func(r hookd.ClassRecommendation) string { return string(r.AutoTune) }},
	{"RAN", func(r hookd.ClassRecommendation) string { return fmtTimePtr(r.RanAt) }},
	{"REASONS", func(r hookd.ClassRecommendation) string {
		if r.Reasons == nil {
			return ""
		}
		return strings.Join(*r.Reasons, "; ")
	}},
}

func (a *app) classesCommand() *cobra.Command {
	return group("classes", "Read traffic classes and act on their tuning recommendations (admin)",
		a.classesList(), a.classesGet(),
		a.classAction("recommendation", "Show the tuner's latest recommendation for a class"),
		a.classesTune(),
		a.classesTuneStatus(),
		a.classAction("apply", "Apply a class's proposed settings"),
		a.classAction("reject", "Reject a class's proposal; the class keeps its settings"))
}

func (a *app) classesList() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List traffic classes",
		Example: "  hookd classes list",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			items, err := client.TrafficClasses.List(cmd.Context())
			if err != nil {
				return err
			}
			return printList(a.printer(), items, classColumns)
		},
	}
}

func (a *app) classesGet() *cobra.Command {
	return &cobra.Command{
		Use:     "get CLASS",
		Short:   "Show a traffic class",
		Example: "  hookd classes get standard",
		Args:    exactArgs(1, "CLASS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			c, err := client.TrafficClasses.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.printer(), *c, classColumns)
		},
	}
}

func (a *app) classAction(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:     name + " CLASS",
		Short:   short,
		Example: "  hookd classes " + name + " standard",
		Args:    exactArgs(1, "CLASS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			var r *hookd.ClassRecommendation
			switch name {
			case "recommendation":
				r, err = client.TrafficClasses.Recommendation(cmd.Context(), args[0])
			case "apply":
				r, err = client.TrafficClasses.Apply(cmd.Context(), args[0])
			case "reject":
				r, err = client.TrafficClasses.Reject(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return printOne(a.printer(), *r, recommendationColumns)
		},
	}
}

func (a *app) classesTune() *cobra.Command {
	var since, until string
	var wait time.Duration
	c := &cobra.Command{
		Use:     "tune CLASS",
		Short:   "Queue a tuning pass of a class for the fleet's tuning leader, and with --wait follow it until it is done",
		Example: "  hookd classes tune standard --since 24h --wait 5m",
		Args:    exactArgs(1, "CLASS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req hookd.TuneRequest
			var err error
			if req.Since, err = a.optTime("since", since); err != nil {
				return err
			}
			if req.Until, err = a.optTime("until", until); err != nil {
				return err
			}
			if wait < 0 {
				return usagef("--wait: must not be negative")
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			st, err := client.TrafficClasses.Tune(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if wait > 0 {
				if st, err = a.followTune(cmd.Context(), client, args[0], st, wait); err != nil {
					return err
				}
			}
			if err := printOne(a.printer(), *st, tuneColumns); err != nil {
				return err
			}
			if st.Status == api.ClassTuneStatusStatusFailed {
				return fmt.Errorf("tuning pass of %s failed: %s", args[0], st.Error)
			}
			return nil
		},
	}
	c.Flags().StringVar(&since, "since", "", "the start of the history the pass reads (RFC 3339, or a duration ago)")
	c.Flags().StringVar(&until, "until", "", "its end (default: now)")
	c.Flags().DurationVar(&wait, "wait", 0, "follow the queued pass for up to this long, until it is done or failed (0: print it queued and return)")
	return c
}

func (a *app) classesTuneStatus() *cobra.Command {
	return &cobra.Command{
		Use:     "tune-status CLASS",
		Short:   "Show where the class's latest queued tuning pass stands",
		Example: "  hookd classes tune-status standard",
		Args:    exactArgs(1, "CLASS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := a.api()
			if err != nil {
				return err
			}
			st, err := client.TrafficClasses.TuneStatus(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.printer(), *st, tuneColumns)
		},
	}
}

// tunePoll is how often a followed tuning pass is read again.
const tunePoll = time.Second

// followTune reads the class's queued pass every tunePoll until it is done
// or failed, or wait has passed (then the last status read).
func (a *app) followTune(ctx context.Context, client *hookd.Client, class string, st *hookd.ClassTuneStatus, wait time.Duration) (*hookd.ClassTuneStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(tunePoll)
	defer t.Stop()
	for st.Status == api.ClassTuneStatusStatusQueued || st.Status == api.ClassTuneStatusStatusRunning {
		select {
		case <-ctx.Done():
			return st, nil
		case <-t.C:
		}
		next, err := client.TrafficClasses.TuneStatus(ctx, class)
		if err != nil {
			if ctx.Err() != nil {
				return st, nil
			}
			return nil, err
		}
		st = next
	}
	return st, nil
}

var tuneColumns = []column[hookd.ClassTuneStatus]{
	{"CLASS", func(s hookd.ClassTuneStatus) string { return s.Class }},
	{"ID", func(s hookd.ClassTuneStatus) string { return fmt.Sprint(s.ID) }},
	{"STATUS", func(s hookd.ClassTuneStatus) string { return string(s.Status) }},
	{"REQUESTED", func(s hookd.ClassTuneStatus) string { return s.RequestedAt.Format(time.RFC3339) }},
	{"FINISHED", func(s hookd.ClassTuneStatus) string { return fmtTimePtr(s.FinishedAt) }},
	{"ERROR", func(s hookd.ClassTuneStatus) string { return s.Error }},
}
