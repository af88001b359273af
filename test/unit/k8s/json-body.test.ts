// A Kubernetes API answer that is not JSON keeps the parser's error as its cause (the log shows
// where the body broke), for both readers of the in-cluster API (Node labels, Node list).
import t from 'tap';
import { jsonBody } from '../../../src/k8s/in-cluster.js';
import { isCsiError } from '../../../src/errors.js';

t.test('a JSON body is parsed', async (t) => {
  t.same(jsonBody('{"metadata":{"labels":{"a":"b"}}}', 'a Node', 'https://k:443'), {
    metadata: { labels: { a: 'b' } },
  });
});

t.test('a body that is not JSON is Unavailable with the parse error as its cause', async (t) => {
  let caught: unknown;
  try {
    jsonBody('<html>502 Bad Gateway</html>', 'a Node list', 'https://10.96.0.1:443');
  } catch (e) {
    caught = e;
  }
  t.ok(isCsiError(caught, 'Unavailable'), 'Unavailable');
  const e = caught as Error;
  t.match(e.message, /^Kubernetes API at https:\/\/10\.96\.0\.1:443 returned a Node list that is not JSON: /);
  t.type(e.cause, SyntaxError, 'the parser error is kept as the cause');
  t.match(e.message, (e.cause as Error).message, "the parser's message is in the message too");
});
