package deploy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Selector is one series selector of a PromQL expression: the metric it
// reads and the label names its matchers use.
type Selector struct {
	Metric string
	Labels []string
}

// promqlWords are PromQL's keywords and binary operators spelt as words.
var promqlWords = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}

// labelListWords are followed by a parenthesised list of label names.
var labelListWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// aggregations may be followed by a by/without clause before their
// parentheses, so they are not always directly followed by "(".
var aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// PromQLSelectors lists the series selectors of a PromQL expression. It
// lexes rather than parses (promtool checks the syntax): an identifier
// followed by "(" is a function, aggregation operators, keywords and the
// label lists after by, without, on, ignoring, group_left and group_right
// are skipped, as are strings, numbers, durations, ranges in brackets and
// comments; every other identifier is a metric name, with the matchers in
// the braces after it. A bare {__name__="x"} selector reads x. Grafana's
// variables ($__rate_interval, $var, ${var}) are skipped.
func PromQLSelectors(expr string) ([]Selector, error) {
	l := &lexer{s: expr}
	var out []Selector
	for {
		l.space()
		if l.i >= len(l.s) {
			return out, nil
		}
		c := l.s[l.i]
		switch {
		case c == '#':
			for l.i < len(l.s) && l.s[l.i] != '\n' {
				l.i++
			}
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.str(); err != nil {
				return nil, err
			}
		case c == '[':
			end := strings.IndexByte(l.s[l.i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("offset %d: unclosed [", l.i)
			}
			l.i += end + 1
		case c == '$':
			l.variable()
		case c == '{':
			labels, name, err := l.matchers()
			if err != nil {
				return nil, err
			}
			if name == "" {
				return nil, errors.New("a selector without a metric name")
			}
			out = append(out, Selector{Metric: name, Labels: labels})
		case isDigit(c) || c == '.':
			for l.i < len(l.s) && (isIdent(l.s[l.i]) || l.s[l.i] == '.') {
				l.i++
			}
		case isIdentStart(c):
			word := l.ident()
			l.space()
			next := byte(0)
			if l.i < len(l.s) {
				next = l.s[l.i]
			}
			switch {
			case slices.Contains(labelListWords, word):
				if next == '(' {
					end := strings.IndexByte(l.s[l.i:], ')')
					if end < 0 {
						return nil, fmt.Errorf("%s: unclosed label list", word)
					}
					l.i += end + 1
				}
			case slices.Contains(promqlWords, strings.ToLower(word)), next == '(', slices.Contains(aggregations, word):
			default:
				sel := Selector{Metric: word}
				if next == '{' {
					labels, name, err := l.matchers()
					if err != nil {
						return nil, fmt.Errorf("%s: %w", word, err)
					}
					if name != "" && name != word {
						return nil, fmt.Errorf("%s: __name__ matcher says %s", word, name)
					}
					sel.Labels = labels
				}
				out = append(out, sel)
			}
		default:
			l.i++
		}
	}
}

type lexer struct {
	s string
	i int
}

func (l *lexer) space() {
	for l.i < len(l.s) && strings.IndexByte(" \t\r\n", l.s[l.i]) >= 0 {
		l.i++
	}
}

func (l *lexer) ident() string {
	start := l.i
	for l.i < len(l.s) && isIdent(l.s[l.i]) {
		l.i++
	}
	return l.s[start:l.i]
}

// str reads a quoted string and returns its raw contents.
func (l *lexer) str() (string, error) {
	q := l.s[l.i]
	start := l.i
	l.i++
	for l.i < len(l.s) {
		switch c := l.s[l.i]; {
		case c == '\\' && q != '`':
			l.i += 2
		case c == q:
			l.i++
			return l.s[start+1 : l.i-1], nil
		default:
			l.i++
		}
	}
	return "", fmt.Errorf("offset %d: unterminated string", start)
}

// variable skips a Grafana variable: $name or ${name...}.
func (l *lexer) variable() {
	l.i++
	if l.i < len(l.s) && l.s[l.i] == '{' {
		if end := strings.IndexByte(l.s[l.i:], '}'); end >= 0 {
			l.i += end + 1
			return
		}
	}
	l.ident()
}

// matchers reads {label op "value", ...} and returns the label names and
// the value of an equality __name__ matcher.
func (l *lexer) matchers() (labels []string, name string, err error) {
	l.i++ // {
	labels = []string{}
	for {
		l.space()
		if l.i >= len(l.s) {
			return nil, "", errors.New("unclosed {")
		}
		if l.s[l.i] == '}' {
			l.i++
			return labels, name, nil
		}
		if l.s[l.i] == ',' {
			l.i++
			continue
		}
		if !isIdentStart(l.s[l.i]) {
			return nil, "", fmt.Errorf("offset %d: want a label name", l.i)
		}
		label := l.ident()
		l.space()
		var op string
		for _, o := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(l.s[l.i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, "", fmt.Errorf("label %s: want =, !=, =~ or !~", label)
		}
		l.i += len(op)
		l.space()
		if l.i >= len(l.s) || strings.IndexByte("\"'`", l.s[l.i]) < 0 {
			return nil, "", fmt.Errorf("label %s: want a quoted value", label)
		}
		v, err := l.str()
		if err != nil {
			return nil, "", err
		}
		if label == "__name__" && op == "=" {
			name = v
			continue
		}
		labels = append(labels, label)
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || isDigit(c) }

// TargetLabels are the labels Prometheus adds to every scraped series
// (job, instance) and those the Kubernetes scrape configs in deploy/k8s
// add; a selector may match on them whatever the metric.
var TargetLabels = []string{"job", "instance", "namespace", "pod"}

// CheckPromQL checks that every selector of expr reads a series the service
// exports and matches only labels that series has (or TargetLabels).
// series returns the label names of the family a series name belongs to
// (a histogram's _bucket has le), and whether there is one.
func CheckPromQL(expr string, series func(name string) (labels []string, ok bool)) []error {
	sels, err := PromQLSelectors(expr)
	if err != nil {
		return []error{err}
	}
	if len(sels) == 0 {
		return []error{errors.New("reads no metric")}
	}
	var errs []error
	for _, s := range sels {
		labels, ok := series(s.Metric)
		if !ok {
			errs = append(errs, fmt.Errorf("%s is not a metric hookd exports", s.Metric))
			continue
		}
		for _, l := range s.Labels {
			if !slices.Contains(labels, l) && !slices.Contains(TargetLabels, l) {
				errs = append(errs, fmt.Errorf("%s has no label %s (it has %v)", s.Metric, l, labels))
			}
		}
	}
	return errs
}
