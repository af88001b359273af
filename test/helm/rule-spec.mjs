// Reads `helm template --show-only templates/prometheusrule.yaml` on stdin and writes the
// PrometheusRule's spec (its rule groups) as a Prometheus rule file for promtool (JSON is YAML).
import { parseAllDocuments } from 'yaml';

let text = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => (text += d));
process.stdin.on('end', () => {
  const rule = parseAllDocuments(text)
    .map((d) => d.toJS())
    .find((o) => o?.kind === 'PrometheusRule');
  if (!rule) {
    process.stderr.write('rule-spec: no PrometheusRule in the rendered chart\n');
    process.exit(1);
  }
  process.stdout.write(JSON.stringify(rule.spec, null, 1) + '\n');
});
