package cli

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
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
	c := &cobra.Command{
		Use:     "tune CLASS",
		Short:   "Run a tuning pass of a class now",
		Example: "  hookd classes tune standard --since 24h",
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
			client, err := a.api()
			if err != nil {
				return err
			}
			r, err := client.TrafficClasses.Tune(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return printOne(a.printer(), *r, recommendationColumns)
		},
	}
	c.Flags().StringVar(&since, "since", "", "the start of the history the pass reads (RFC 3339, or a duration ago)")
	c.Flags().StringVar(&until, "until", "", "its end (default: now)")
	return c
}
