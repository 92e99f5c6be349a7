// Reads a JSON list of PromQL queries on stdin; writes, for each, the
// offsets where Prometheus' grammar (the one its own query editor uses)
// finds a syntax error: an empty list for a query that parses.
import { parser } from "@prometheus-io/lezer-promql";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const answers = JSON.parse(input).map((query) => {
  const errors = [];
  parser.parse(query).iterate({
    enter(node) {
      if (node.type.isError) errors.push(node.from);
    },
  });
  return errors;
});
process.stdout.write(JSON.stringify(answers));
