// Loads Compose files the way `docker compose config` does (compose-go: the Compose
// specification's schema, interpolation, merges, consistency such as depends_on naming a
// service that exists) and prints the project's services; exits 1 with the loader's error.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-check COMPOSE_FILE...")
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions(os.Args[1:], cli.WithOsEnv, cli.WithDotEnv)
	if err == nil {
		var project interface{ ServiceNames() []string }
		project, err = options.LoadProject(context.Background())
		if err == nil {
			fmt.Println(strings.Join(project.ServiceNames(), " "))
			return
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
