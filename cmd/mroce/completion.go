package main

import (
	"io"

	"github.com/urfave/cli/v2"
)

// manCommand writes mroce's man page, made from the command definitions,
// so that it cannot drift from them. make install puts it in place.
func manCommand() *cli.Command {
	return &cli.Command{
		Name:   "man",
		Usage:  "write the man page (roff) to standard output",
		Hidden: true,
		Action: func(c *cli.Context) error {
			page, err := c.App.ToManWithSection(1)
			if err != nil {
				return err
			}
			_, err = io.WriteString(c.App.Writer, page)
			return err
		},
	}
}

// bashCompletion completes a mroce command line in bash (and in zsh
// through bashcompinit): it asks mroce itself, with the words typed so
// far and --generate-bash-completion, what may come next.
const bashCompletion = `# bash completion for mroce: source it, or let make install put it in
# bash-completion's directory. zsh: autoload bashcompinit; bashcompinit.
_mroce() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  if [[ "$cur" == -* ]]; then
    words+=("$cur")
  fi
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "$("${words[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
}
complete -o bashdefault -o default -F _mroce mroce
`

// completionCommand writes a shell's completion script for mroce.
func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "write the shell completion script for bash, zsh or fish to standard output",
		ArgsUsage: "bash | zsh | fish",
		Description: "In bash, source <(mroce completion bash) completes mroce's commands and flags\n" +
			"in the shell it runs in.",
		Action: func(c *cli.Context) error {
			switch shell := c.Args().First(); {
			case c.NArg() != 1:
				return usagef(c, "completion: one shell, bash, zsh or fish")
			case shell == "bash" || shell == "zsh":
				_, err := io.WriteString(c.App.Writer, bashCompletion)
				return err
			case shell == "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				_, err = io.WriteString(c.App.Writer, script)
				return err
			default:
				return usagef(c, "completion: %q: want bash, zsh or fish", shell)
			}
		},
	}
}
