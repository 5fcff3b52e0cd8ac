package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/berth-dev/berth/apitype"
)

var diskCmd = &command{
	name:    "disk",
	summary: "Retain, purge and archive VM disks (see also 'berth get disks')",
	help: `Usage: berth get disks [ID] [-o json|yaml|wide]
       berth disk retain ID [--note TEXT]
       berth disk release ID
       berth disk purge ID [--force]
       berth disk purge --orphans
       berth disk sweep
       berth disk archive ID [--purge]

A disk is a replica's or a Computer's files on the server's host, found by
walking the drivers' directories. get disks lists them: STATE is running,
stopped, orphan (no deployment or Computer claims it) or unknown (its
driver is not open there), SIZE the allocated bytes, EXPIRES when the
sweep removes it (stopped disks after --disk-ttl, orphans after
--disk-orphan-ttl; never a retained one).

retain keeps a disk from the sweep (--note says why; --note "" clears
it); release undoes it.
purge removes one disk (--force: also one whose sandbox runs, which is
stopped first, or one retained); purge --orphans removes every orphan
not retained. sweep removes what has expired now. archive stores a
gzipped tarball of the disk in the server's artifact store (--purge:
then removes the disk); get disks shows its progress.
`,
	run: runDisk,
}

func runDisk(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand (retain, release, purge, sweep or archive)")
	}
	sub, rest := args[0], args[1:]
	c, err := e.client()
	if err != nil {
		return err
	}
	switch sub {
	case "retain", "release":
		fs := e.flagSet("disk " + sub)
		note := fs.String("note", "", "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one disk ID")
		}
		retain := sub == "retain"
		var n *string // unchanged unless --note is given ("" clears it)
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "note" {
				n = note
			}
		})
		if err := c.PatchDisk(ctx, pos[0], &retain, n); err != nil {
			return err
		}
		if retain {
			fmt.Fprintf(e.stdout, "disk/%s retained\n", pos[0])
		} else {
			fmt.Fprintf(e.stdout, "disk/%s released\n", pos[0])
		}
		return nil
	case "purge":
		fs := e.flagSet("disk purge")
		orphans := fs.Bool("orphans", false, "")
		force := fs.Bool("force", false, "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		var out *apitype.DiskOutcome
		switch {
		case *orphans && (len(pos) != 0 || *force):
			return usagef("--orphans takes no ID and no --force")
		case *orphans:
			out, err = c.PurgeOrphanDisks(ctx)
		case len(pos) != 1:
			return usagef("want one disk ID, or --orphans")
		default:
			out, err = c.DeleteDisk(ctx, pos[0], *force)
		}
		if err != nil {
			return err
		}
		return e.printOutcome(out)
	case "sweep":
		if err := e.parseNone(e.flagSet("disk sweep"), rest); err != nil {
			return err
		}
		out, err := c.SweepDisks(ctx)
		if err != nil {
			return err
		}
		return e.printOutcome(out)
	case "archive":
		fs := e.flagSet("disk archive")
		purge := fs.Bool("purge", false, "")
		pos, err := e.parse(fs, rest)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one disk ID")
		}
		v, err := c.ArchiveDisk(ctx, pos[0], *purge)
		if err != nil {
			return err
		}
		if e.structured() {
			return e.printValue("", v)
		}
		fmt.Fprintf(e.stdout, "disk/%s archiving as %s (%s to read); 'berth get disks' shows its progress\n", pos[0], v.ID, sizeString(v.ExpectedBytes))
		return nil
	}
	return usagef("unknown subcommand %q (retain, release, purge, sweep or archive)", sub)
}

// printOutcome prints what a removal did.
func (e *env) printOutcome(out *apitype.DiskOutcome) error {
	if e.structured() {
		return e.printValue("", out)
	}
	for _, id := range out.Removed {
		fmt.Fprintf(e.stdout, "disk/%s removed\n", id)
	}
	for _, f := range out.Failed {
		fmt.Fprintf(e.stderr, "disk/%s not removed: %s\n", f.SandboxID, f.Error)
	}
	fmt.Fprintf(e.stdout, "%d removed, %s freed\n", len(out.Removed), sizeString(out.FreedBytes))
	if len(out.Failed) > 0 {
		return errReported
	}
	return nil
}

// listDisks prints the disk inventory (`get disks`), or one disk.
func (e *env) listDisks(ctx context.Context, id string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	if e.structured() {
		return e.printItem(ctx, c, "/disks", "disks", "disk", "sandbox_id", id)
	}
	inv, err := c.Disks(ctx)
	if err != nil {
		return err
	}
	ds := inv.Disks
	if id != "" {
		ds = nil
		for _, d := range inv.Disks {
			if d.SandboxID == id {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return fmt.Errorf("no disk %q", id)
		}
	}
	if !inv.Complete {
		fmt.Fprintf(e.stderr, "warning: the census is incomplete: %s\n", inv.IncompleteReason)
	}
	if len(ds) == 0 {
		fmt.Fprintln(e.stderr, "No disks found.")
		return nil
	}
	wide := e.output == "wide"
	tw := newTable(e.stdout)
	if wide {
		row(tw, "SANDBOX", "STATE", "OWNER", "SIZE", "APPARENT", "MODIFIED", "EXPIRES", "RETAIN", "HELD-BY", "NOTE", "ROOTS")
	} else {
		row(tw, "SANDBOX", "STATE", "OWNER", "SIZE", "EXPIRES", "RETAIN", "NOTE")
	}
	for _, d := range ds {
		owner := orDash(d.Name)
		if !d.Claimed && d.Name != "" {
			owner += " (gone)"
		}
		if wide {
			roots := "-"
			if len(d.Roots) > 0 {
				roots = d.Roots[0]
			}
			row(tw, d.SandboxID, d.State, owner, sizeString(d.Bytes), sizeString(d.ApparentBytes), stamp(&d.ModifiedAt), stamp(d.ExpiresAt), strconv.FormatBool(d.Retain), orDash(d.HeldBy), orDash(d.Note), roots)
		} else {
			row(tw, d.SandboxID, d.State, owner, sizeString(d.Bytes), stamp(d.ExpiresAt), strconv.FormatBool(d.Retain), orDash(d.Note))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if id == "" {
		t := inv.Totals
		fmt.Fprintf(e.stdout, "\n%d disks, %s; %d running, %d stopped, %d orphans, %d retained; %d expired now (%s reclaimable)\n",
			t.Disks, sizeString(t.Bytes), t.Running, t.Stopped, t.Orphan, t.Retained, t.ExpiringNow, sizeString(t.ReclaimableBytes))
	}
	return nil
}
