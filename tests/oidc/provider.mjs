// An independent OpenID provider for the SSO tests (tests/accounts/pages/test_sso.py): the `oidc-provider`
// package with its development login form, configured by the JSON file named on the command line:
// {port, clients: [...], jwks: {keys: [...]}, accounts: {id: {claims}}}. Prints "listening URL" once up.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

const provider = new Provider(issuer, {
  clients: config.clients,
  jwks: config.jwks,
  // The claims go in the ID token itself (what the portal reads), not only in userinfo.
  conformIdTokenClaims: false,
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'groups'],
  },
  features: { devInteractions: { enabled: true } },
  pkce: { required: () => true },
  async findAccount(ctx, id) {
    const account = config.accounts[id];
    if (!account) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...account }; } };
  },
  cookies: { keys: ['test-only-cookie-key'] },
  ttl: { AuthorizationCode: 60, IdToken: 3600, AccessToken: 3600, Interaction: 600, Session: 600, Grant: 600 },
});
provider.proxy = false;

const server = provider.listen(config.port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
