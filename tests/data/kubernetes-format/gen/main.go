// Command gen evaluates CEL string.format expressions with cel-go's strings extension
// at version 2, as Kubernetes 1.32 to 1.37 configure it, and prints what each gives:
// the value, or the error and whether cel-go found it when compiling or evaluating.
// It reads one expression per line (expressions.txt) and writes cases.json.
// Run from this folder: go run ./gen < expressions.txt > cases.json
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
)

type outcome struct {
	Expr    string `json:"expr"`
	Stage   string `json:"stage"` // "value", "compile" or "eval"
	Value   string `json:"value,omitempty"`
	Message string `json:"message,omitempty"`
}

var location = regexp.MustCompile(`^ERROR: <input>:\d+:\d+: `)

func main() {
	env, err := cel.NewEnv(ext.Strings(ext.StringsVersion(2)))
	if err != nil {
		panic(err)
	}
	var out []outcome
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		expr := scanner.Text()
		if expr == "" || strings.HasPrefix(expr, "#") {
			continue
		}
		checked, issues := env.Compile(expr)
		if issues.Err() != nil {
			first := strings.SplitN(issues.Err().Error(), "\n", 2)[0]
			out = append(out, outcome{Expr: expr, Stage: "compile", Message: location.ReplaceAllString(first, "")})
			continue
		}
		program, err := env.Program(checked)
		if err != nil {
			panic(err)
		}
		value, _, err := program.Eval(map[string]any{})
		if err != nil {
			out = append(out, outcome{Expr: expr, Stage: "eval", Message: err.Error()})
			continue
		}
		out = append(out, outcome{Expr: expr, Stage: "value", Value: value.Value().(string)})
	}
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(map[string]any{"source": "github.com/google/cel-go v0.22.0 ext.Strings(ext.StringsVersion(2))", "cases": out}); err != nil {
		panic(err)
	}
}
