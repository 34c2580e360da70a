# ruff: noqa: B007, E501  (PyTorch example code, kept as its authors write it)
"""A VAE in the style of pytorch/examples vae/main.py, shrunk to 8x8 images: Linear encoder
and decoder, the reparameterization trick, BCE + KL loss, Adam, a DataLoader. The noise of
the reparameterization is torch.randn_like unless the caller passes it (the tests pass
numpy's, so that both frameworks draw the same). PyTorch code: only the imports are ours."""
import parallel_autograd as torch
import parallel_autograd.nn.functional as F
import parallel_autograd.optim as optim
from parallel_autograd import nn
from parallel_autograd.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, 4)
        self.fc22 = nn.Linear(32, 4)
        self.fc3 = nn.Linear(4, 32)
        self.fc4 = nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps=None):
        std = torch.exp(0.5 * logvar)
        if eps is None:
            eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps=None):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction='sum')

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


def make_models():
    return {"model": VAE()}


def run(models, images, noises=None, batch_size=16, epochs=2):
    """main.py's train() per epoch (noise `noises[step]` when given): each step's loss per
    sample, then a no_grad test loss and a sample from the decoder."""
    model = models["model"]
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(images)), batch_size=batch_size)
    losses = []
    step = 0
    for epoch in range(1, epochs + 1):
        model.train()
        for batch_idx, (data,) in enumerate(train_loader):
            optimizer.zero_grad()
            eps = None if noises is None else torch.from_numpy(noises[step])
            recon_batch, mu, logvar = model(data, eps)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            losses.append(loss.item() / len(data))
            optimizer.step()
            step += 1
    model.eval()
    with torch.no_grad():
        data = torch.from_numpy(images[:batch_size])
        mu, logvar = model.encode(data.view(-1, 64))
        recon = model.decode(mu)
        losses.append(loss_function(recon, data, mu, logvar).item() / len(data))
        sample = model.decode(torch.zeros(2, 4))
        losses.append(sample.sum().item())
    return losses
